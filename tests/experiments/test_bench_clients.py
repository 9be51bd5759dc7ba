"""The benchmarks' CPU accounting (``/proc``) and their h2load clients, against a real server on port 0."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import grpc
import pytest

from experiments.bench import h2load_clients
from experiments.bench.bench_overload import halves, started_on
from experiments.bench.cpu_accounting import descendants, process_cpu_seconds, tree_cpu_seconds
from predictor.rpc.names import METHOD_PREFIX
from predictor.rpc.protos import pb2
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\ntime.sleep(30)"


@pytest.mark.parametrize(("said", "seconds"), [("1.00s", 1.0), ("999.95ms", 0.99995), ("812.50us", 0.0008125)])
def test_h2load_summary_read_in_whatever_unit_it_gives_the_elapsed_time(said, seconds):
    """h2load says a run that ended just under its second in ms (its own unit choice)."""
    summary = (f"finished in {said}, 1627.53 req/s, 128.56KB/s\n"
               "requests: 1628 total, 1628 started, 1627 done, 1626 succeeded, 2 failed, 0 errored, 0 timeout\n"
               "traffic: 128.56KB (131646) total, 4.78KB (4891) headers (space savings 93.30%), 27.66KB (28322) data\n")
    parsed = h2load_clients._parse(summary)
    assert parsed == {"calls": 1626, "errors": 1, "elapsed": pytest.approx(seconds), "data_bytes": 28322}


def test_tree_cpu_counts_a_grandchild():
    """A child that starts a grandchild burning CPU: the tree's CPU holds the grandchild's, the child's alone not."""
    child_code = (f"import subprocess, sys, time\np = subprocess.Popen([sys.executable, '-c', {BURN.format(s=0.6)!r}])\n"
                  "time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", child_code])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and tree_cpu_seconds(child.pid) - process_cpu_seconds(child.pid) < 0.5:
            time.sleep(0.1)
        assert len(descendants(child.pid)) == 1
        assert tree_cpu_seconds(child.pid) - process_cpu_seconds(child.pid) >= 0.5
        assert process_cpu_seconds(child.pid) < 0.5
    finally:
        for pid in descendants(child.pid):
            subprocess.run(["kill", str(pid)], check=False)
        child.kill()
        child.wait()
    assert process_cpu_seconds(child.pid) == 0.0  # gone: nothing to read


@pytest.fixture(scope="module")
def served():
    service = Service(ServiceConfig())
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    for record in synthetic_records(300, seed=3):
        service.observe(record)
    yield f"127.0.0.1:{port}"
    stop_server(server, service, grace=0.5)


def _request(device: str, model: str) -> bytes:
    messages = pb2()
    query = messages.BatchQuery(device=device, batch=messages.Batch(model=model, batch_size=2))
    return messages.PredictLatencyRequest(query=query).SerializeToString()


@pytest.mark.skipif(not h2load_clients.available(), reason="h2load not installed (apt-get install nghttp2-client)")
def test_h2load_clients_answered_and_errors_detected(served):
    good = _request("sim0", "resnet")
    with grpc.insecure_channel(served) as channel:
        answer = channel.unary_unary(METHOD_PREFIX + "PredictLatency")(good, timeout=10)
    results = h2load_clients.run(served, METHOD_PREFIX + "PredictLatency", [good], 2, 1.0, [len(answer)])
    assert len(results) == 2
    for result in results:
        assert result["calls"] > 10 and result["errors"] == 0
        assert result["cpu_s"] > 0 and result["warmup_calls"] == 0
        assert result["data_bytes"] >= result["calls"] * (5 + len(answer) - 1)
        assert len(result["latency"]) >= result["calls"] and 0 < result["latency"].min() < 1.0
    refused = _request("", "resnet")  # no device: INVALID_ARGUMENT, an HTTP 200 without a message
    with pytest.raises(RuntimeError, match="some were errors"):
        h2load_clients.run(served, METHOD_PREFIX + "PredictLatency", [refused], 1, 1.0, [len(answer)])


def test_grpc_frame():
    assert h2load_clients.grpc_frame(b"abc") == b"\x00\x00\x00\x00\x03abc"


def test_open_loop_warm_up_waits_out_refusals_and_fails_on_other_errors():
    """The open loop's warm-up call is retried while a real server refuses it (RESOURCE_EXHAUSTED), as one just
    measured beyond its capacity does, and fails at once on any other error."""
    import asyncio

    from experiments.bench.rpc_load import _warm_up_call

    calls = []

    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        calls.append(request)
        if request == b"refused" and len(calls) <= 3:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy")
        if request == b"broken":
            context.abort(grpc.StatusCode.INTERNAL, "broken")
        return request

    handler = grpc.method_handlers_generic_handler("t.T", {"Call": grpc.unary_unary_rpc_method_handler(answer)})

    async def run(request: bytes) -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await _warm_up_call(channel.unary_unary("/t.T/Call"), request)
        finally:
            await server.stop(0)

    asyncio.run(run(b"refused"))
    assert len(calls) == 4  # three refusals waited out, then answered
    calls.clear()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        asyncio.run(run(b"broken"))
    assert raised.value.code() == grpc.StatusCode.INTERNAL and len(calls) == 1


def test_overload_bench_pins_children_and_restores_itself():
    """``started_on``: a process started inside runs on the given cores; this process's own cores come back."""
    split = halves()
    if split is None:
        pytest.skip("a single core: nothing to pin")
    client_cores, server_cores = split
    assert client_cores and server_cores and not client_cores & server_cores
    before = os.sched_getaffinity(0)
    with started_on(server_cores):
        child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                               capture_output=True, text=True, check=True)
    assert child.stdout.strip() == str(sorted(server_cores))
    assert os.sched_getaffinity(0) == before
