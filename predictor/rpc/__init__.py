"""The thin gRPC layer over :mod:`predictor.service`.

Nothing here imports the generated code at import time; use
:func:`predictor.rpc.protos.load` (which generates it when missing or stale).
"""
