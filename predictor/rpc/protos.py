"""The generated protobuf and gRPC modules, imported statically.

The code is generated at build time (``make protos``, run by ``make setup``,
or the ``build_py`` step of ``pip install``; see :mod:`predictor.rpc.codegen`),
never at run time. When it is missing, importing this module raises an
``ImportError`` that says how to generate it.

Examples
--------
>>> from predictor.rpc.protos import SERVICE_NAME, pb2
>>> pb2().Batch(model="mlp", batch_size=2).batch_size
2
>>> SERVICE_NAME
'interference.v1.InterferenceService'
"""

from __future__ import annotations

from types import ModuleType

from predictor.rpc.names import SERVICE_NAME  # noqa: F401  (re-exported)

MODULE = "predictor.rpc.generated.interference.v1"

try:
    from predictor.rpc.generated.interference.v1 import interference_pb2, interference_pb2_grpc
except ModuleNotFoundError as exc:
    if not (exc.name or "").startswith("predictor.rpc.generated"):
        raise  # a missing dependency (grpcio, protobuf), not missing generated code
    raise ImportError(
        f"the generated gRPC code ({MODULE}) is missing: run `make protos` "
        "(or `python -m predictor.rpc.codegen`) in the source checkout, or reinstall the package"
    ) from exc

if interference_pb2.DESCRIPTOR.services_by_name["InterferenceService"].full_name != SERVICE_NAME:
    raise ImportError(f"the generated gRPC code does not define {SERVICE_NAME}: run `make protos`")


def load() -> tuple[ModuleType, ModuleType]:
    """The generated modules.

    Returns
    -------
    tuple of module
        ``(interference_pb2, interference_pb2_grpc)``: the messages, and the stubs and servicer base.
    """
    return interference_pb2, interference_pb2_grpc


def pb2() -> ModuleType:
    """The message module, ``interference_pb2``."""
    return interference_pb2


def pb2_grpc() -> ModuleType:
    """The service stubs and servicer base, ``interference_pb2_grpc``."""
    return interference_pb2_grpc
