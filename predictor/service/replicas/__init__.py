"""Serving from more than one process: shards, published model versions on file, answers forwarded to the learner."""
