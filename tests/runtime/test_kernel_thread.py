"""The kernel thread (:mod:`predictor.runtime.kernel_thread`): a call runs while its caller goes on, and its
result or exception comes back through ``wait``."""

from __future__ import annotations

import threading

import pytest

from predictor.runtime.kernel_thread import KernelThread


def test_the_caller_goes_on_while_the_call_runs():
    release = threading.Event()
    entered = threading.Event()

    def blocked(value):
        entered.set()
        assert release.wait(10), "the caller never went on"
        return value * 2

    with KernelThread() as worker:
        worker.start(blocked, 21)  # returns although the call cannot finish until the caller acts
        assert worker.busy
        assert entered.wait(10)
        release.set()
        assert worker.wait() == 42
        assert not worker.busy
        worker.start(threading.get_ident)
        assert worker.wait() != threading.get_ident()  # another thread ran it


def test_an_exception_comes_back_through_wait_and_the_thread_goes_on():
    with KernelThread() as worker:
        worker.start(int, "not a number")
        with pytest.raises(ValueError, match="not a number"):
            worker.wait()
        worker.start(len, [1, 2, 3])
        assert worker.wait() == 3


def test_misuse_is_refused():
    worker = KernelThread()
    with pytest.raises(RuntimeError, match="no call was started"):
        worker.wait()
    release = threading.Event()
    worker.start(release.wait, 10)
    with pytest.raises(RuntimeError, match="not collected"):
        worker.start(len, [])
    release.set()
    worker.close()  # collects the call still running
    assert not worker.busy
    with pytest.raises(RuntimeError, match="closed"):
        worker.start(len, [])
    worker.close()  # twice: nothing more


def test_close_drops_a_failed_call_that_nobody_collected():
    worker = KernelThread()
    worker.start(int, "x")
    worker.close()
    assert not worker.busy
