"""A bare echo service on the same gRPC stack: the floor that the real service is measured against.

Each method decodes its request with the real request type (so the same bytes
are parsed as by the service) and answers a canned response given at
construction (so the same bytes go back); nothing else happens. Built with a
generic handler, so no ``.proto`` of its own is needed; the methods live
under :data:`ECHO_SERVICE` and are called with :func:`method_path`.

Examples
--------
>>> from predictor.rpc.protos import pb2
>>> messages = pb2()
>>> canned = messages.PredictLatencyResponse(prediction=messages.Prediction(latency_ms=4.0))
>>> methods = {"PredictLatency": (messages.PredictLatencyRequest, canned)}
>>> server, port = create_echo_server("127.0.0.1:0", methods)
>>> server.start()
>>> channel = grpc.insecure_channel(f"127.0.0.1:{port}")
>>> call = channel.unary_unary(method_path("PredictLatency"))
>>> answer = call(messages.PredictLatencyRequest().SerializeToString())
>>> messages.PredictLatencyResponse.FromString(answer).prediction.latency_ms
4.0
>>> channel.close(); _ = server.stop(None).wait()
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent import futures
from typing import Any

import grpc

ECHO_SERVICE = "interference.bench.v1.EchoService"
Responses = Mapping[str, tuple[Any, Any]]  # method name -> (request message class, canned response)


def method_path(name: str) -> str:
    """The full path of an echo method, e.g. ``/interference.bench.v1.EchoService/PredictLatency``."""
    return f"/{ECHO_SERVICE}/{name}"


def _handlers(responses: Responses, streams: Responses, asynchronous: bool) -> grpc.GenericRpcHandler:
    handlers = {}
    for name, (request_type, response) in responses.items():
        if asynchronous:

            async def unary(request: Any, context: Any, _response: Any = response) -> Any:
                return _response

        else:

            def unary(request: Any, context: Any, _response: Any = response) -> Any:  # type: ignore[misc]
                return _response

        handlers[name] = grpc.unary_unary_rpc_method_handler(
            unary,
            request_deserializer=request_type.FromString,
            response_serializer=type(response).SerializeToString,
        )
    for name, (request_type, response) in streams.items():
        if asynchronous:

            async def stream(requests: Any, context: Any, _response: Any = response) -> Any:
                async for _ in requests:
                    pass
                return _response

        else:

            def stream(requests: Any, context: Any, _response: Any = response) -> Any:  # type: ignore[misc]
                for _ in requests:
                    pass
                return _response

        handlers[name] = grpc.stream_unary_rpc_method_handler(
            stream,
            request_deserializer=request_type.FromString,
            response_serializer=type(response).SerializeToString,
        )
    return grpc.method_handlers_generic_handler(ECHO_SERVICE, handlers)


def create_echo_server(
    address: str, responses: Responses, streams: Responses | None = None, *, max_workers: int = 8
) -> tuple[grpc.Server, int]:
    """A thread-pool echo server (built, not started) bound to ``address``; returns it and its port.

    Parameters
    ----------
    address
        ``host:port``; port 0 binds any free port.
    responses
        Unary methods: name to (request message class, canned response).
    streams
        Client-streaming methods, the same way: every message is decoded, then the canned response sent.
    max_workers
        Threads handling RPCs.
    """
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="echo"))
    server.add_generic_rpc_handlers((_handlers(responses, streams or {}, asynchronous=False),))
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind the echo server to {address}")
    return server, port


def create_echo_aio_server(
    address: str, responses: Responses, streams: Responses | None = None
) -> tuple[grpc.aio.Server, int]:
    """The same on ``grpc.aio`` (call from within the event loop that will run it)."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_handlers(responses, streams or {}, asynchronous=True),))
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind the echo server to {address}")
    return server, port
