"""Waiting for a refit whose worker process dies while it sends its result ends (the pool breaks)
rather than waiting forever for the rest of the message (:func:`predictor.regressors.refit_worker.result`).

The kill is timed to land while the worker pickles or sends a 400 MB result (the send on this 2-vCPU
machine; the wait hung there without the fix); wherever it lands, the wait must end."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import BrokenExecutor
from pathlib import Path

from predictor.regressors import refit_worker


def _large_result(marker: str, size: int) -> bytes:
    """A result of ``size`` bytes; ``marker`` written when it is made (the send comes next)."""
    out = b"\x01" * size
    Path(marker).write_text("sending")
    return out


def test_a_worker_killed_while_sending_its_result_breaks_the_pool(tmp_path):
    marker = tmp_path / "sending"
    future = refit_worker.submit(_large_result, str(marker), 400_000_000)
    pids = refit_worker.worker_pids()
    assert pids
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert marker.exists()
    time.sleep(0.3)  # into the pickling or the send of 400 MB
    os.kill(pids[0], signal.SIGKILL)
    outcome: list = []

    def wait() -> None:
        try:
            refit_worker.result(future, poll_s=0.2)
            outcome.append("answered")
        except BrokenExecutor:
            outcome.append("broken")

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(30)
    assert outcome in (["broken"], ["answered"])  # ended: broken, or answered where the send had finished
    for _ in range(50):  # a fresh worker takes the next refit, once the pool has noticed the death
        refit_worker.restart()
        try:
            assert refit_worker.result(refit_worker.submit(sum, [1, 2])) == 3
            break
        except BrokenExecutor:
            time.sleep(0.1)
    else:
        raise AssertionError("no fresh worker")
