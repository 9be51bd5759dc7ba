"""Offline replay of records through predictors: the 75/25 split and the prequential protocol.

- :mod:`~predictor.prequential.evaluation`: record by record, any predictor.
- :mod:`~predictor.prequential.blocks`: ``rls`` and ``sgd`` learned in compiled blocks, and the split's
  scored part predicted per block.

May import the learners (:mod:`predictor.predictors`, :mod:`predictor.regressors`) and below.
"""
