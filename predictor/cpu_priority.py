"""CPU priority of a whole process: learning yields the cores to the answers.

With ``predictor serve --workers N`` the learner processes and the answering workers share the
machine's cores. When the cores are short, a scheduler's answer should not wait behind learning:
``--learner-nice N`` raises the learners' niceness, and ``--learner-policy`` puts them in a lower
scheduling class (Linux, ``sched(7)``):

* ``normal`` (``SCHED_OTHER``): the default, weighted by niceness;
* ``batch`` (``SCHED_BATCH``): taken as CPU-bound; it never preempts a task that wakes up;
* ``idle`` (``SCHED_IDLE``): runs only on a core that nothing else wants; an answering worker that
  wakes up preempts it at once. Under sustained answer load that fills every core, learning (and
  so the acknowledgement of observations) waits until the load eases.

Linux schedules threads, and a thread inherits its creator's niceness and class when it starts, so
:func:`lower_priority` changes every thread the process already has (by thread id, from
``/proc/self/task``); the threads started afterwards inherit it.

Examples
--------
>>> check_policy("idle")
>>> check_policy("fast")
Traceback (most recent call last):
...
ValueError: --learner-policy must be one of normal, batch, idle, got 'fast'
"""

from __future__ import annotations

import os

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
        A key of :data:`POLICIES`; ``normal`` leaves the class as it is.

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
