"""The ``predictor`` command line (the console script ``predictor``, or ``python -m predictor.cli``).

One module per sub-command, each exposing ``register(subparsers)``:

- :mod:`predictor.cli.main`: the parser and :func:`main`.
- :mod:`predictor.cli.importing`: ``predictor import``, third-party datasets to ``coloc/v1``.
- :mod:`predictor.cli.replay`: ``predictor replay``, one log through one predictor.
- :mod:`predictor.cli.evaluate`: ``predictor evaluate``, predictors compared on logs.
- :mod:`predictor.cli.collect`: ``predictor collect``, the real co-located workload to a log.
- :mod:`predictor.cli.serve`: ``predictor serve``, the gRPC service.
- :mod:`predictor.cli.query`: ``predictor query``, questions to a running service.
- :mod:`predictor.cli.report`: ``predictor report``, a log streamed into a running service (exactly once).
- :mod:`predictor.cli.demo`: ``predictor demo``, service, workload and a sample scheduler end to end.
- :mod:`predictor.cli.state`: ``predictor state merge``, two shards' saved states into one.

This is the only part of :mod:`predictor` that imports :mod:`collectors`.
"""

from predictor.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
