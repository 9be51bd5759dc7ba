"""Wall-clock steps, backwards and forwards, under a real gRPC server (port 0, in process).

``time-machine`` moves the process's wall clock (``time.time``, ``datetime``) and leaves the
monotonic clock alone, as an NTP step or an operator's ``date -s`` does. What must hold:

* rate limits, the live view's elapsed times, the status uptime and periodic work run on the
  monotonic clock: a step neither refills a bucket nor starves it, nor expires a running batch;
* a deadline given as a duration is a duration; one given as a timestamp is read once, against
  the wall clock, when the request arrives (a timestamp already past is infeasible, not an error);
* the live view's side log dates batches on the wall clock (the only clock that survives a
  restart): after a step forwards past the horizon they expire; after a step backwards they are
  restored, and the view's own (monotonic) staleness limit still ends them.
"""

from __future__ import annotations

import time

import pytest
import time_machine

from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.rpc.server import create_server, stop_server
from predictor.service import CoRunnerSource, Query, Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

HOUR = 3600.0
QUERY = Query("sim0", BatchSpec("mlp", 2, {"l2_util": 0.1}), co_runner_source=CoRunnerSource.EXPLICIT)


@pytest.fixture
def running(tmp_path):
    service = Service(ServiceConfig(snapshot_every_s=0, rate_limit=5.0, rate_burst=20, rate_limit_by="source"))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open(tmp_path / "state")
    # No RPC deadline: gRPC's Python layer turns a timeout into a wall-clock deadline that its C core
    # checks against the real clock, which the in-process fake leaves behind (a real step moves both).
    client = InterferenceClient(f"127.0.0.1:{port}", timeout=None)
    yield service, client
    client.close()
    stop_server(server, service, grace=0.1)


@pytest.mark.parametrize("step", [HOUR, -2 * HOUR], ids=["forwards", "backwards"])
def test_a_wall_clock_step_moves_neither_rate_limits_nor_the_live_view(running, step):
    service, client = running
    records = synthetic_records(200, seed=4)
    began = time.monotonic()

    def most_yet() -> int:
        """Tokens the bucket can have given since it opened: the burst, plus 5 per monotonic second."""
        return 20 + int(5.0 * (time.monotonic() - began))

    first = client.report_observations(records[:30]).accepted
    assert 20 <= first <= most_yet()  # the burst, then limited (a slow moment refills a token)
    client.batch_start("sim0", "b1", BatchSpec("bert", 4), device_kind="sim")
    real = time.time()
    with time_machine.travel(real + step, tick=True):
        assert abs(time.time() - (real + step)) < 60  # the step took
        second = client.report_observations(records[30:60]).accepted
        # No hour of tokens refilled (and none owed after a step back): only monotonic seconds count.
        assert first + second <= most_yet()
        status = client.status()
        assert 0 <= status.uptime_s < 120 and status.batches_running == 1
        (batch, remaining), = service.live.running("sim0")
        assert batch.batch_id == "b1" and remaining > 0
        answer = client.check_deadline(QUERY, deadline_ms=50.0)
        assert answer.deadline_ms == 50.0
        at = client.check_deadline(QUERY, deadline_time=time.time() + 0.5)  # read against the wall clock
        assert 0 < at.deadline_ms <= 500.0
        past = client.check_deadline(QUERY, deadline_time=real + step - 10.0)
        assert past.deadline_ms < 0 and not past.feasible  # a past timestamp: infeasible, no error
        time.sleep(0.5)  # half a second of monotonic time refills 2.5 tokens, whatever the wall says
        third = client.report_observations(records[60:70]).accepted
        assert third >= 2 and first + second + third <= most_yet()
    assert client.status().batches_running == 1


@pytest.mark.parametrize(
    "step, restored, expired", [(2 * HOUR, 0, 1), (-2 * HOUR, 1, 0)], ids=["forwards", "backwards"]
)
def test_the_live_view_after_a_restart_across_a_wall_clock_step(tmp_path, step, restored, expired):
    config = ServiceConfig(snapshot_every_s=0, stale_after_s=30.0)
    first = Service(config)
    first.open(tmp_path / "state")
    first.batch_start("gpu0", "L4", "b1", BatchSpec("bert", 4))
    first.close()
    with time_machine.travel(time.time() + step, tick=True):
        now = [0.0]
        second = Service(config, clock=lambda: now[0])
        second.open(tmp_path / "state")
        status = second.status()
        assert (status.live_restored, status.live_expired, status.batches_running) == (restored, expired, restored)
        assert second.live.knows("gpu0")
        now[0] = 31.0  # a batch restored after a step backwards still ends by the view's own limit
        assert second.live.running("gpu0") == []
        second.close()
