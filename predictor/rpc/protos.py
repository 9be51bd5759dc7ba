"""Lazy access to the generated protobuf and gRPC modules.

The generated code is not kept in git; :func:`load` imports it, generating it
first (:mod:`predictor.rpc.codegen`) when it is missing or older than the
``.proto`` sources of a source checkout.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

from predictor.rpc.names import SERVICE_NAME  # noqa: F401  (re-exported)

MODULE = "predictor.rpc.generated.interference.v1"


@functools.cache
def load() -> tuple[ModuleType, ModuleType]:
    """``(interference_pb2, interference_pb2_grpc)``, generated on first use when needed."""
    from predictor.rpc import codegen

    if not codegen.is_up_to_date():
        try:
            codegen.generate()
        except (codegen.CodegenError, OSError) as exc:
            raise ImportError(
                f"the gRPC code in {codegen.GENERATED_DIR} is missing or stale and could not be "
                f"generated ({exc}); run `python -m predictor.rpc.codegen`"
            ) from exc
    pb2 = importlib.import_module(f"{MODULE}.interference_pb2")
    pb2_grpc = importlib.import_module(f"{MODULE}.interference_pb2_grpc")
    return pb2, pb2_grpc


def pb2() -> ModuleType:
    """The message module."""
    return load()[0]


def pb2_grpc() -> ModuleType:
    """The service stubs and servicer base."""
    return load()[1]
