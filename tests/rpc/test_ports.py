"""A port already in use: ``predictor serve`` refuses it at once, naming it, instead of sharing it.

Real servers: a ``predictor serve`` child process holds a port; a second one on the same port (one
process, or a ``--workers`` supervisor) exits non-zero with a message naming the port, and the first
goes on answering alone. ``--workers N`` shares its port among its own workers only.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from concurrent import futures

import grpc
import pytest
from serve_process import ROOT, start_server

from predictor.rpc.client import InterferenceClient
from predictor.rpc.processes.options import ServeOptions
from predictor.rpc.processes.ports import PortInUse, check_port_free
from predictor.rpc.processes.serve import serve
from predictor.rpc.processes.supervisor import reserve_port
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service, ServiceConfig


def _serve_cli(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "predictor.cli", "serve", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)
    return done, time.monotonic() - start


def test_a_second_server_on_a_used_port_exits_naming_the_port_and_the_first_keeps_it_alone(tmp_path):
    first = start_server(tmp_path, name="first")
    try:
        with InterferenceClient(first.target) as client:
            client.wait_ready(60)
            done, _ = _serve_cli("--host", "127.0.0.1", "--port", str(first.port), "--metrics-port", "0")
            assert done.returncode == 2, done.stderr
            assert f"the gRPC port {first.port} on 127.0.0.1 is already in use" in done.stderr
            assert "SERVING" not in done.stdout and "listening" not in done.stdout  # nothing was started
            # on every interface too (the kernel sees 0.0.0.0:P overlap 127.0.0.1:P)
            done, _ = _serve_cli("--port", str(first.port), "--metrics-port", "0")
            assert done.returncode == 2 and f"port {first.port}" in done.stderr
            assert client.status().ready
        assert first.proc.poll() is None
    finally:
        first.stop()


def test_a_port_held_by_another_program_with_so_reuseport_is_refused_before_the_model_loads():
    # gRPC's default binding (SO_REUSEPORT on): what a second server used to join silently
    other = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = other.add_insecure_port("127.0.0.1:0")
    other.start()
    try:
        with pytest.raises(PortInUse, match=f"the gRPC port {port} on 127.0.0.1 is already in use"):
            check_port_free("127.0.0.1", port)
        for workers in (1, 2):  # one process, and a supervisor (which would otherwise reserve it beside)
            options = ServeOptions(host="127.0.0.1", port=port, metrics_port=0, workers=workers)
            assert serve(ServiceConfig(), options) == 2
        with pytest.raises(PortInUse):
            reserve_port("127.0.0.1", port)
    finally:
        other.stop(0).wait()


def test_a_metrics_port_in_use_is_named_before_anything_starts(capsys):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        metrics_port = held.getsockname()[1]
        options = ServeOptions(host="127.0.0.1", port=0, metrics_port=metrics_port)
        assert serve(ServiceConfig(), options) == 2
    err = capsys.readouterr().err
    assert f"the metrics port {metrics_port} on 127.0.0.1 is already in use" in err


def test_create_server_binds_exclusively_unless_told_to_share():
    service = Service(ServiceConfig(snapshot_every_s=0))
    server, port = create_server("127.0.0.1:0", service)
    try:
        with pytest.raises(OSError, match=f"cannot bind the gRPC server to 127.0.0.1:{port}"):
            create_server(f"127.0.0.1:{port}", Service(ServiceConfig(snapshot_every_s=0)))
        with pytest.raises(OSError):  # an exclusive socket is not shared even by one that would share
            create_server(f"127.0.0.1:{port}", Service(ServiceConfig(snapshot_every_s=0)), reuse_port=True)
    finally:
        stop_server(server, service, grace=0)
    # sockets that share, beside a reservation: what the workers of one supervisor do
    reserved = reserve_port("127.0.0.1", 0)
    port = reserved.getsockname()[1]
    services = [Service(ServiceConfig(snapshot_every_s=0)) for _ in range(2)]
    try:
        servers = [create_server(f"127.0.0.1:{port}", s, reuse_port=True)[0] for s in services]
        with pytest.raises(PortInUse):  # and nobody else: not a second supervisor, not a one-process server
            reserve_port("127.0.0.1", port)
        with pytest.raises(OSError):
            create_server(f"127.0.0.1:{port}", Service(ServiceConfig(snapshot_every_s=0)))
        for server, service in zip(servers, services, strict=True):
            stop_server(server, service, grace=0)
    finally:
        reserved.close()


@pytest.mark.slow
def test_a_second_supervisor_is_refused_and_a_one_process_server_too(tmp_path):
    multi = start_server(tmp_path, "--workers", "2", name="multi", timeout=240)
    try:
        with InterferenceClient(multi.target) as client:
            client.wait_ready(120)
            for extra in (("--workers", "2"), ()):
                done, seconds = _serve_cli("--host", "127.0.0.1", "--port", str(multi.port), "--metrics-port", "0",
                                           *extra)
                assert done.returncode == 2 and f"the gRPC port {multi.port} on 127.0.0.1" in done.stderr, done.stderr
                assert "worker" not in done.stdout
            assert client.status().ready
    finally:
        assert multi.stop(timeout=60) == 0
