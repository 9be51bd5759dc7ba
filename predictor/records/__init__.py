"""The ``coloc/v1`` record and everything that reads, checks and writes it.

- :mod:`~predictor.records.record`: :class:`~predictor.records.record.Record` and its parts, parsing.
- :mod:`~predictor.records.rules`: the validation rules every input passes (records and queries).
- :mod:`~predictor.records.logio`: JSONL logs (gzip too), strict or tolerant;
  :mod:`~predictor.records.typed_decoding` decodes them fast, :mod:`~predictor.records.inflate_ahead`
  inflates ``.gz`` on a thread of its own.
- :mod:`~predictor.records.colocations`, :mod:`~predictor.records.keyed`: many co-locations and
  many keyed mappings held column-wise.
- :mod:`~predictor.records.importers`: third-party datasets to ``coloc/v1``.

May import :mod:`predictor.runtime` only; stays light (no gRPC, river, scikit-learn or torch).
"""
