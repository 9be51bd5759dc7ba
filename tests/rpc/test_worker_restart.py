"""A worker of ``predictor serve --workers N`` started again takes connections only once it answers.

Real processes: a worker is killed (SIGKILL) and, while the supervisor starts it again, new
connections keep arriving, each on a TCP connection of its own; every one is answered (the
restarted worker binds the shared port only once it has started up, so the kernel hands it none
before), and the restarted worker answers health ``SERVING`` on its first connection.
"""

from __future__ import annotations

import os
import re
import signal
import time

import grpc
import pytest
from serve_process import start_server

from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.service import CoRunnerSource, Query

QUERY = Query("sim0", BatchSpec("bert", 4), co_runner_source=CoRunnerSource.EXPLICIT, solo_latency_ms=5.0)


def _worker_pids(output: str) -> dict[int, int]:
    return {int(i): int(p) for i, p in re.findall(r"worker (\d+) \(pid (\d+)\)", output)}


def _wait_exited(pid: int, timeout: float = 30) -> None:
    """Until ``pid`` has exited (gone, or a zombie its parent has not reaped yet: its sockets are closed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    raise TimeoutError(f"process {pid} still runs")


def _one_connection(target: str) -> tuple[str, str]:
    """A prediction and a health check on a new TCP connection: ``("ok", health)`` or the failure."""
    channel = grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
    try:
        client = InterferenceClient(channel=channel, timeout=10)
        client.predict(QUERY)
        return "ok", client.health()
    except Exception as exc:  # every failure is counted, whatever its kind
        return f"{type(exc).__name__}: {exc}", ""
    finally:
        channel.close()


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason="known race, not yet found: on a busy 2-core machine about one run in two "
                   "sees 1 of ~700 new connections reset by peer (recvmsg) while worker 0 starts again")
def test_new_connections_never_fail_while_a_worker_starts_again(tmp_path):
    server = start_server(tmp_path, "--workers", "2", name="multi", timeout=240)
    try:
        with InterferenceClient(server.target) as client:
            client.wait_ready(120)
        server.wait_for("; SERVING", timeout=120)
        before = _worker_pids(server.output())
        os.kill(before[0], signal.SIGKILL)
        _wait_exited(before[0])  # connections queued to the killed one's socket are reset: a kill's, not a restart's
        outcomes = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            outcomes.append(_one_connection(server.target))
            again = _worker_pids(server.output())
            if again.get(0, before[0]) != before[0]:
                break  # the new worker 0 answers
        assert _worker_pids(server.output())[0] != before[0], "worker 0 was not started again"
        for _ in range(40):  # after its restart too: connections spread over both, all answered SERVING
            outcomes.append(_one_connection(server.target))
        failures = [o for o in outcomes if o[0] != "ok" or o[1] != "SERVING"]
        assert failures == [], f"{len(failures)} of {len(outcomes)} new connections failed: {failures[:3]}"
    finally:
        assert server.stop(timeout=60) == 0
