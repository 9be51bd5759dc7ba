"""``predictor.cpu_priority``: every thread of a real process lowered, threads started before included."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest

from predictor.cpu_priority import POLICIES, check_nice, check_policy, lower_priority


def _lower_then_wait(nice: int, policy: str, lowered, done) -> None:
    """In the child: start a thread, lower the process, start another, report, and wait."""
    before = threading.Thread(target=done.wait)
    before.start()
    lower_priority(nice, policy)
    after = threading.Thread(target=done.wait)
    after.start()
    lowered.set()
    done.wait(60)
    before.join()
    after.join()


def priorities(pid: int) -> dict[int, tuple[int, int]]:
    """``{thread id: (scheduling class, niceness)}`` of process ``pid``."""
    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    return {t: (os.sched_getscheduler(t), os.getpriority(os.PRIO_PROCESS, t)) for t in tids}


@pytest.mark.parametrize(("nice", "policy"), [(5, "normal"), (0, "batch"), (4, "idle"), (19, "idle")])
def test_every_thread_of_the_process_is_lowered(nice, policy):
    context = multiprocessing.get_context("spawn")
    lowered, done = context.Event(), context.Event()
    child = context.Process(target=_lower_then_wait, args=(nice, policy, lowered, done))
    child.start()
    try:
        assert lowered.wait(60)
        threads = priorities(child.pid)
        assert len(threads) >= 3  # the main thread and the two started around the call
        base = os.getpriority(os.PRIO_PROCESS, 0)
        assert set(threads.values()) == {(POLICIES[policy], min(19, base + nice))}
    finally:
        done.set()
        child.join(60)
    assert child.exitcode == 0


def test_this_process_is_left_alone_by_normal_and_zero():
    before = priorities(os.getpid())
    lower_priority(0, "normal")
    assert priorities(os.getpid()) == before


@pytest.mark.parametrize("nice", [-1, 20, 100])
def test_niceness_out_of_range_is_refused_naming_the_option(nice):
    with pytest.raises(ValueError, match=rf"--learner-nice must be in 0\.\.19, got {nice}"):
        lower_priority(nice)
    with pytest.raises(ValueError, match="--learner-nice"):
        check_nice(nice)


@pytest.mark.parametrize("policy", ["fifo", "", "IDLE"])
def test_unknown_policy_is_refused_naming_the_option(policy):
    with pytest.raises(ValueError, match="--learner-policy must be one of normal, batch, idle"):
        check_policy(policy)
    before = priorities(os.getpid())
    with pytest.raises(ValueError):
        lower_priority(3, policy)
    assert priorities(os.getpid()) == before  # nothing changed before the refusal
