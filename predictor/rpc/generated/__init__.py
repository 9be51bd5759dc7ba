"""Generated gRPC code (``python -m predictor.rpc.codegen``); only ``__init__.py`` is kept in git."""
