"""CPU priority of a whole process: learning yields the cores to the answers.

With ``predictor serve --workers N`` the learner processes and the answering workers share the
machine's cores. When the cores are short, a scheduler's answer should not wait behind learning:
``--learner-nice N`` raises the learners' niceness and ``--learner-policy normal|batch|idle`` puts
them in a lower scheduling class (:func:`lower_priority`); ``--learner-cpus`` / ``--worker-cpus``
keep them on separate cores (:func:`pin_to_cpus`), so that learning never runs on a core an answer
needs (SMT siblings still slow each other a little); ``--pin-workers`` holds each answering worker
on one CPU of its own (:func:`worker_cpus`), its threads and caches together.

In one process, ``--handler-cpus`` splits the process's threads instead (:func:`handler_split`):
the RPC handler threads, where answers are computed holding the GIL, run on those CPUs
(:func:`pin_handler_thread`), and every other thread (gRPC's own, the learner, the snapshots) on
the rest, so that gRPC's work between two answers does not evict the answers' code and data from
their core's caches. A thread inherits its creator's niceness, class and CPUs, so
:func:`lower_priority` and :func:`pin_to_cpus` change every thread the process already has (from
``/proc/self/task``) and the threads started afterwards inherit it.

Examples
--------
>>> check_policy("idle")
>>> check_policy("fast")
Traceback (most recent call last):
...
ValueError: --learner-policy must be one of normal, batch, idle, got 'fast'
>>> parse_cpus("0-2,5", "--learner-cpus", available=range(8))
(0, 1, 2, 5)
>>> parse_cpus("3", "--worker-cpus", available=(0, 1))
Traceback (most recent call last):
...
ValueError: --worker-cpus: CPU 3 is not one this process may use (0-1)
>>> handler_split((0,), available=(0, 1, 2))
(1, 2)
>>> handler_split((0, 1), available=(0, 1))
Traceback (most recent call last):
...
ValueError: --handler-cpus: 0-1 leaves no CPU for the process's other threads (it may use 0-1)
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

POLICIES = {"normal": os.SCHED_OTHER, "batch": os.SCHED_BATCH, "idle": os.SCHED_IDLE}
MAX_NICE = 19


def check_policy(policy: str) -> None:
    """``ValueError`` naming ``--learner-policy`` unless ``policy`` is one of :data:`POLICIES`."""
    if policy not in POLICIES:
        raise ValueError(f"--learner-policy must be one of {', '.join(POLICIES)}, got {policy!r}")


def check_nice(nice: int) -> None:
    """``ValueError`` naming ``--learner-nice`` unless ``0 <= nice <= 19``."""
    if not 0 <= nice <= MAX_NICE:
        raise ValueError(f"--learner-nice must be in 0..{MAX_NICE}, got {nice}")


def thread_ids() -> list[int]:
    """The ids of this process's threads (Linux), or ``[0]`` (the calling thread) where unknown."""
    try:
        return sorted(int(tid) for tid in os.listdir("/proc/self/task"))
    except OSError:  # pragma: no cover - not Linux
        return [0]


def lower_priority(nice: int = 0, policy: str = "normal") -> None:
    """Raise the niceness of every thread of this process by ``nice`` and put it in class ``policy``.

    Parameters
    ----------
    nice:
        Niceness increment, ``0..19`` (lowering priority needs no privilege).
    policy:
        A key of :data:`POLICIES` (Linux, ``sched(7)``): ``normal`` (``SCHED_OTHER``, weighted by
        niceness) leaves the class as it is; ``batch`` (``SCHED_BATCH``) is taken as CPU-bound and
        never preempts a task that wakes up; ``idle`` (``SCHED_IDLE``) runs only on a core that
        nothing else wants, so an answering worker that wakes up preempts it at once, and under
        sustained answer load that fills every core, learning (and so the acknowledgement of
        observations) waits until the load eases.

    Raises
    ------
    ValueError
        For a ``nice`` or ``policy`` out of range, naming the option.
    """
    check_nice(nice)
    check_policy(policy)
    for tid in thread_ids():
        try:
            if nice:
                os.setpriority(os.PRIO_PROCESS, tid, min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, tid) + nice))
            if policy != "normal":
                os.sched_setscheduler(tid, POLICIES[policy], os.sched_param(0))
        except ProcessLookupError:  # the thread ended meanwhile
            continue


def parse_cpus(text: str, option: str, available: Iterable[int] | None = None) -> tuple[int, ...]:
    """The CPUs of a Linux CPU list (``"1"``, ``"0-3,6"``), sorted; ``ValueError`` naming ``option``.

    ``available``: the CPUs that may be named (default: those this process may run on).
    """
    cpus: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if match is None:
            raise ValueError(f"{option}: {part!r} is not a CPU or a range of CPUs (e.g. 0-3,6)")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            raise ValueError(f"{option}: the range {part.strip()!r} ends before it starts")
        cpus.update(range(first, last + 1))
    return check_cpus(cpus, option, available)


def check_cpus(cpus: Iterable[int], option: str, available: Iterable[int] | None = None) -> tuple[int, ...]:
    """``cpus`` sorted, after checking each is one that may be named (``available``, default: those this
    process may run on); ``ValueError`` naming ``option`` otherwise."""
    allowed = sorted(os.sched_getaffinity(0) if available is None else available)
    for cpu in sorted(set(cpus)):
        if cpu not in allowed:
            raise ValueError(f"{option}: CPU {cpu} is not one this process may use ({_cpu_list(allowed)})")
    return tuple(sorted(set(cpus)))


def _cpu_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2,5"``."""
    runs: list[list[int]] = []
    for cpu in cpus:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def worker_cpus(index: int, worker: Sequence[int], learner: Sequence[int], pin_each: bool) -> tuple[int, ...]:
    """The CPUs answering worker ``index`` runs on: ``worker`` (``--worker-cpus``; none: any), or
    with ``pin_each`` (``--pin-workers``) one of them of its own, round robin, from ``worker`` or
    else from the CPUs this process may use but ``learner`` (all of them if that leaves none).

    One CPU keeps a worker's threads and caches together (the README's "Scaling out" has the
    figures).

    >>> worker_cpus(0, (2, 3), (), False)
    (2, 3)
    >>> [worker_cpus(i, (2, 3), (), True) for i in range(3)]
    [(2,), (3,), (2,)]
    """
    if not pin_each:
        return tuple(worker)
    mine, learners = sorted(os.sched_getaffinity(0)), set(learner)
    cpus = list(worker) or [cpu for cpu in mine if cpu not in learners] or mine
    return (cpus[index % len(cpus)],)


HANDLER_THREAD_NAME = "rpc-handler"
"""The name an RPC handler thread pinned by :func:`pin_handler_thread` shows (``top -H``, ``/proc``)."""


def handler_split(handler: Iterable[int], available: Iterable[int] | None = None) -> tuple[int, ...]:
    """The CPUs left to a process's other threads by ``--handler-cpus`` ``handler``: those it may use
    (``available``, default: this process's) but ``handler``; ``ValueError`` naming the option if none
    are left or ``handler`` names a CPU it may not use."""
    allowed = sorted(os.sched_getaffinity(0) if available is None else available)
    handler = check_cpus(handler, "--handler-cpus", allowed)
    rest = tuple(cpu for cpu in allowed if cpu not in handler)
    if not rest:
        raise ValueError(f"--handler-cpus: {_cpu_list(list(handler))} leaves no CPU for the process's other "
                         f"threads (it may use {_cpu_list(allowed)})")
    return rest


def pin_handler_thread(cpus: Iterable[int]) -> None:
    """Keep the calling thread on ``cpus`` and name it :data:`HANDLER_THREAD_NAME` (Linux; the thread
    initializer of the RPC handler threads under ``--handler-cpus``)."""
    os.sched_setaffinity(0, set(cpus))  # 0: the calling thread
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):  # a name is for people; the CPUs are what matter
        Path(f"/proc/self/task/{tid}/comm").write_text(HANDLER_THREAD_NAME)


def pin_to_cpus(cpus: Iterable[int]) -> None:
    """Keep every thread of this process on ``cpus`` (nothing: leave them where they may run)."""
    cpus = set(cpus)
    if not cpus:
        return
    for tid in thread_ids():
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            continue
