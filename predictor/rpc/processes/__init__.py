"""``predictor serve`` as processes: one that learns and answers, or learners and answering workers under a supervisor."""
