"""Online interference prediction for co-located ML inference batches.

The names a user needs are importable from the package itself; each is loaded
on first use (:pep:`562`), so ``import predictor`` stays cheap and pulls in
neither gRPC nor river, scikit-learn or torch until a name that needs them is
asked for.

- Records (``coloc/v1``): :class:`BatchSpec`, :class:`CoRunner`, :class:`Record`,
  :class:`RecordError`, :func:`parse_record`, from :mod:`predictor.records.record`.
- Logs: :func:`iter_records`, :func:`read_records`, :func:`write_records`,
  :class:`RecordWriter`, :class:`ReadReport`, from :mod:`predictor.records.logio`.
- Predictors: :func:`make_predictor` (the registry's
  :func:`~predictor.predictors.registry.create`: a name or
  ``name:key=value,...`` spec to a fresh predictor), :func:`available_predictors`
  (its :func:`~predictor.predictors.registry.available`), :class:`LatencyPredictor`
  (the base class of third-party predictors) and :func:`check_predictor`
  (their contract checks, from :mod:`predictor.testing`).
- Service: :class:`Service`, :class:`ServiceConfig` and :class:`Query`, from
  :mod:`predictor.service`; :class:`InterferenceClient`, the gRPC client, from
  :mod:`predictor.rpc.client`.

Examples
--------
>>> from predictor import BatchSpec, InterferenceClient, Record, available_predictors, make_predictor
>>> available_predictors()
['ensemble', 'ewma', 'forest', 'rls', 'sgd', 'solo', 'static', 'tree']
>>> model = make_predictor("solo")
>>> model.learn_one(Record("cpu0", BatchSpec("mlp", 2), latency_ms=4.0, solo_latency_ms=3.5))
>>> model.predict_one(Record("cpu0", BatchSpec("mlp", 2), latency_ms=None))
3.5
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from predictor.runtime.lazy_exports import lazy_exports

__version__ = "0.1.0"

# Exported name -> (module, attribute in that module).
_EXPORTS: dict[str, tuple[str, str]] = {
    "BatchSpec": ("predictor.records.record", "BatchSpec"),
    "CoRunner": ("predictor.records.record", "CoRunner"),
    "Record": ("predictor.records.record", "Record"),
    "RecordError": ("predictor.records.record", "RecordError"),
    "parse_record": ("predictor.records.record", "parse_record"),
    "ReadReport": ("predictor.records.logio", "ReadReport"),
    "RecordWriter": ("predictor.records.logio", "RecordWriter"),
    "iter_records": ("predictor.records.logio", "iter_records"),
    "read_records": ("predictor.records.logio", "read_records"),
    "write_records": ("predictor.records.logio", "write_records"),
    "LatencyPredictor": ("predictor.predictors.base", "LatencyPredictor"),
    "make_predictor": ("predictor.predictors.registry", "create"),
    "available_predictors": ("predictor.predictors.registry", "available"),
    "check_predictor": ("predictor.testing", "check_predictor"),
    "Query": ("predictor.service", "Query"),
    "Service": ("predictor.service", "Service"),
    "ServiceConfig": ("predictor.service", "ServiceConfig"),
    "InterferenceClient": ("predictor.rpc.client", "InterferenceClient"),
}

__all__ = [  # the keys of _EXPORTS, spelt out for linters and type checkers
    "BatchSpec",
    "CoRunner",
    "InterferenceClient",
    "LatencyPredictor",
    "Query",
    "ReadReport",
    "Record",
    "RecordError",
    "RecordWriter",
    "Service",
    "ServiceConfig",
    "available_predictors",
    "check_predictor",
    "iter_records",
    "make_predictor",
    "parse_record",
    "read_records",
    "write_records",
]

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from predictor.predictors.base import LatencyPredictor
    from predictor.predictors.registry import available as available_predictors
    from predictor.predictors.registry import create as make_predictor
    from predictor.records.logio import (
        ReadReport,
        RecordWriter,
        iter_records,
        read_records,
        write_records,
    )
    from predictor.records.record import BatchSpec, CoRunner, Record, RecordError, parse_record
    from predictor.rpc.client import InterferenceClient
    from predictor.service import Query, Service, ServiceConfig
    from predictor.testing import check_predictor


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
