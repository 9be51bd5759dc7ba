"""CPU time of processes and process trees, from ``/proc`` (Linux), for the benchmarks' accounting.

A benchmark on a machine of a few cores is often bound by the CPU that *all* its processes need
(servers, their learners, and the client processes on the same cores), not by one server's speed.
:func:`process_cpu_seconds` reads one process's user + system time, :func:`tree_cpu_seconds` a
process and every descendant alive at the time of reading (a server started as a supervisor of
workers and learners), so that a benchmark can print what each side spent per call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from collectors.conditions import busy_cpu_seconds

T = TypeVar("T")

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int, proc: Path) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (which may hold spaces), or ``None`` if gone."""
    try:
        text = (proc / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text.rsplit(")", 1)[1].split()


def process_cpu_seconds(pid: int, proc: str | Path = "/proc") -> float:
    """User plus system CPU seconds of process ``pid`` so far (all its threads); 0 if it is gone."""
    fields = _stat_fields(pid, Path(proc))
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def descendants(pid: int, proc: str | Path = "/proc") -> list[int]:
    """The pids of every living descendant of ``pid`` (children, their children, ...)."""
    proc = Path(proc)
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name), proc)
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, frontier = [], [pid]
    while frontier:
        kids = children.get(frontier.pop(), [])
        found += kids
        frontier += kids
    return found


def tree_cpu_seconds(pid: int, proc: str | Path = "/proc") -> float:
    """CPU seconds of ``pid`` and of its living descendants (a child that has exited is not counted)."""
    return sum(process_cpu_seconds(p, proc) for p in [pid, *descendants(pid, proc)])


def cpu_per_call_ms(cpu_seconds: float, calls: int) -> float:
    """CPU milliseconds per call (NaN without calls)."""
    return cpu_seconds / calls * 1e3 if calls else float("nan")



@dataclass(frozen=True)
class CpuWindow:
    """The CPU seconds a process tree and the whole machine spent over ``wall_s`` seconds."""

    tree_s: float
    busy_s: float
    wall_s: float

    @property
    def tree_cores(self) -> float:
        """The cores the process tree kept busy on average."""
        return self.tree_s / self.wall_s

    @property
    def busy_cores(self) -> float:
        """The cores the whole machine kept busy on average."""
        return self.busy_s / self.wall_s


def cpu_around(pid: int, run: Callable[[], T]) -> tuple[T, CpuWindow]:
    """``run()``'s result, and the CPU that ``pid``'s process tree and the machine spent while it ran."""
    tree0, busy0, wall0 = tree_cpu_seconds(pid), busy_cpu_seconds(), time.perf_counter()
    result = run()
    wall = time.perf_counter() - wall0
    return result, CpuWindow(tree_cpu_seconds(pid) - tree0, busy_cpu_seconds() - busy0, wall)
