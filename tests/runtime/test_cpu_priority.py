"""``predictor.runtime.cpu_priority``: every thread of a real process lowered, threads started before included."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest

from predictor.runtime.cpu_priority import (
    POLICIES,
    check_nice,
    check_policy,
    handler_split,
    lower_priority,
    parse_cpus,
    pin_to_cpus,
    worker_cpus,
)


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


def _pin_then_wait(cpus, pinned, done) -> None:
    """In the child: start a thread, pin the process, start another, report, and wait."""
    before = threading.Thread(target=done.wait)
    before.start()
    pin_to_cpus(cpus)
    after = threading.Thread(target=done.wait)
    after.start()
    pinned.set()
    done.wait(60)
    before.join()
    after.join()


def test_every_thread_of_the_process_is_pinned():
    cpus = {sorted(os.sched_getaffinity(0))[-1]}
    context = multiprocessing.get_context("spawn")
    pinned, done = context.Event(), context.Event()
    child = context.Process(target=_pin_then_wait, args=(cpus, pinned, done))
    child.start()
    try:
        assert pinned.wait(60)
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert len(tids) >= 3
        assert {frozenset(os.sched_getaffinity(t)) for t in tids} == {frozenset(cpus)}
    finally:
        done.set()
        child.join(60)
    assert child.exitcode == 0


def test_no_cpus_leaves_the_process_where_it_may_run():
    before = os.sched_getaffinity(0)
    pin_to_cpus(())
    assert os.sched_getaffinity(0) == before


@pytest.mark.parametrize(("text", "message"), [
    ("", "'' is not a CPU"), ("a", "'a' is not a CPU"), ("1-", "'1-' is not a CPU"), ("3-1", "ends before it starts"),
    ("999", "CPU 999 is not one this process may use"),
])
def test_a_bad_cpu_list_is_refused_naming_the_option(text, message):
    with pytest.raises(ValueError, match=rf"^--learner-cpus: .*{message}"):
        parse_cpus(text, "--learner-cpus")


def test_cpu_lists_and_ranges():
    assert parse_cpus(" 0 - 1 ,3", "--worker-cpus", available=range(4)) == (0, 1, 3)
    assert parse_cpus("2,2,1", "--worker-cpus", available=range(4)) == (1, 2)


def test_serve_refuses_cpus_without_workers(capsys):
    from predictor.rpc.processes.options import ServeOptions
    from predictor.rpc.processes.serve import serve
    from predictor.service import ServiceConfig

    assert serve(ServiceConfig(), ServeOptions(workers=1, learner_cpus=(0,))) == 2
    assert "--learner-cpus, --worker-cpus and --pin-workers need --workers 2" in capsys.readouterr().err
    assert serve(ServiceConfig(), ServeOptions(workers=1, pin_workers=True)) == 2
    assert "--pin-workers need --workers 2" in capsys.readouterr().err


def test_each_pinned_worker_gets_one_cpu_round_robin():
    mine = sorted(os.sched_getaffinity(0))
    assert worker_cpus(5, (1, 2), (0,), False) == (1, 2)  # not pinned each: the whole list, or any CPU
    assert worker_cpus(5, (), (0,), False) == ()
    assert [worker_cpus(i, (4, 6, 7), (), True) for i in range(4)] == [(4,), (6,), (7,), (4,)]
    # no --worker-cpus: the CPUs the learners leave, all of them if they leave none
    left = [cpu for cpu in mine if cpu != mine[-1]] or mine
    assert [worker_cpus(i, (), (mine[-1],), True) for i in range(len(left))] == [(cpu,) for cpu in left]
    assert worker_cpus(0, (), tuple(mine), True) == (mine[0],)


def test_serve_refuses_a_cpu_this_process_may_not_use(capsys):
    from predictor.rpc.processes.options import ServeOptions
    from predictor.rpc.processes.serve import serve
    from predictor.service import ServiceConfig

    assert serve(ServiceConfig(), ServeOptions(workers=2, worker_cpus=(0, 999))) == 2
    assert "--worker-cpus: CPU 999 is not one this process may use" in capsys.readouterr().err


# --------------------------------------------------------------------------- --handler-cpus (one process)


def test_handler_split_leaves_the_other_cpus_and_refuses_none_left():
    assert handler_split((1,), available=(0, 1, 2, 3)) == (0, 2, 3)
    assert handler_split((0, 2), available=(0, 1, 2, 3)) == (1, 3)
    with pytest.raises(ValueError, match="--handler-cpus: 0-1 leaves no CPU"):
        handler_split((0, 1), available=(0, 1))
    with pytest.raises(ValueError, match="--handler-cpus: CPU 7 is not one this process may use"):
        handler_split((7,), available=(0, 1))


def test_serve_refuses_handler_cpus_with_workers_or_leaving_no_cpu(capsys):
    from predictor.rpc.processes.options import ServeOptions
    from predictor.rpc.processes.serve import serve
    from predictor.service import ServiceConfig

    mine = tuple(sorted(os.sched_getaffinity(0)))
    assert serve(ServiceConfig(), ServeOptions(workers=2, handler_cpus=mine[:1])) == 2
    assert "--handler-cpus needs --workers 1" in capsys.readouterr().err
    assert serve(ServiceConfig(), ServeOptions(workers=1, handler_cpus=mine)) == 2
    assert "leaves no CPU for the process's other threads" in capsys.readouterr().err


def thread_cpus(pid: int) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, CPUs)`` of every thread of process ``pid``."""
    threads = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            threads.append((name, tuple(sorted(os.sched_getaffinity(int(tid))))))
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
    return threads


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--handler-cpus needs 2 CPUs or more")
def test_serve_runs_its_handler_threads_on_their_cpus_and_every_other_thread_on_the_rest(tmp_path):
    """A real ``predictor serve --handler-cpus FIRST``: after calls from 4 concurrent clients, the RPC handler
    threads (named ``rpc-handler``) are on FIRST and every other thread (gRPC's, the learner, the main one) on
    the CPUs left, the server learning and answering meanwhile."""
    from serve_process import start_server

    from predictor.rpc.client import InterferenceClient
    from predictor.runtime.cpu_priority import HANDLER_THREAD_NAME
    from predictor.service.errors import ResourceExhausted
    from predictor.service.synthetic import synthetic_records

    mine = sorted(os.sched_getaffinity(0))
    handler, rest = (mine[0],), tuple(mine[1:])
    server = start_server(tmp_path, "--handler-cpus", str(mine[0]))
    try:
        with InterferenceClient(server.target) as client:
            client.wait_ready(30)
            assert client.report_observations(synthetic_records(50, seed=5)).accepted == 50

        def ask() -> None:
            with InterferenceClient(server.target) as client:
                for _ in range(40):
                    try:
                        client.status()
                    except ResourceExhausted:
                        pass  # refused at once under load: the shedder's answer, as good as any here

        askers = [threading.Thread(target=ask) for _ in range(4)]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join()
        threads = thread_cpus(server.proc.pid)
    finally:
        server.kill()
    handlers = [cpus for name, cpus in threads if name == HANDLER_THREAD_NAME]
    others = [(name, cpus) for name, cpus in threads if name != HANDLER_THREAD_NAME]
    assert handlers and all(cpus == handler for cpus in handlers), threads
    assert len(others) >= 3 and all(cpus == rest for _, cpus in others), threads  # main, gRPC's, the learner's
