"""CPU signals from ``/proc``, readable without privileges.

Signals, each over the interval since the previous read:

=============== ===============================================================
``cpu_util``     mean busy fraction of all cores (``/proc/stat``), in [0, 1]
``cpuN_util``    busy fraction of core N (the first 16 cores)
``cpu_util_max`` busiest core's fraction (more than one core)
``cpu_steal``    fraction of time stolen by the hypervisor
``run_queue``    runnable tasks at the read, not counting the reader (``procs_running``)
``procs_blocked`` tasks blocked on I/O at the read
``ctxt_kps``     context switches, thousands per second
``pgfault_kps``  page faults, thousands per second (``/proc/vmstat``): memory traffic proxy
``cpu_pressure`` fraction of time some task waited for a CPU (``/proc/pressure/cpu``)
``mem_pressure`` fraction of time some task stalled on memory (``/proc/pressure/memory``)
``other_cpu``    cores busy with processes *not* of the workload, over the last
                 ``foreign_span_s`` (with ``own_pids`` only; see below)
=============== ===============================================================

``other_cpu`` is the load nobody reported: all cores' busy time (``/proc/stat``) less the CPU
time of the workload's own processes (``/proc/<pid>/stat``, every thread), in cores. Give the
workload's processes as ``own_pids`` (a callable, asked at each read, so that workers started
later count); a process that exits leaves the sum without a jump (only processes present at
both ends of the span count). The span is longer than one read (half a second by default),
because a 20 ms interval of 2 cores holds 4 jiffies and would read in steps of half a core.

Utilisations come from jiffies (1/100 s): over a 20 ms interval they are
coarse, and averaging over a batch window smooths them; a core whose counters
did not advance since the previous read keeps its previous value.

A file that cannot be read (no PSI in this kernel, a container hiding
``/proc/vmstat``) leaves its signals out rather than reporting 0.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from collectors.sampler import DEFAULT_HZ, Sampler

MAX_CORE_SIGNALS = 16
_SCALARS = ("ctxt", "procs_running", "procs_blocked")


@dataclass
class _Counters:
    """Cumulative counters of one read."""

    t: float
    cpus: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    scalars: dict[str, int] = field(default_factory=dict)
    pgfault: int | None = None
    psi_cpu: int | None = None
    psi_mem: int | None = None
    own: dict[int, int] | None = None  # jiffies of each own process (with ``own_pids`` only)


class _ProcFile:
    """A ``/proc`` file kept open and re-read from offset 0 (cheaper than reopening)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._missing = False

    def read(self) -> str | None:
        if self._fd is None:
            if self._missing:
                return None
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                self._missing = True
                return None
        try:
            return os.pread(self._fd, 1 << 16, 0).decode("ascii", "replace")
        except OSError:
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _cpu_times(stat: str) -> tuple[dict[str, tuple[int, int, int]], dict[str, int]]:
    """Per-cpu (busy, total, steal) jiffies and the scalar counters of ``/proc/stat``."""
    cpus: dict[str, tuple[int, int, int]] = {}
    scalars: dict[str, int] = {}
    for line in stat.splitlines():
        if line.startswith("cpu"):
            parts = line.split()
            fields = [int(x) for x in parts[1:9]]
            fields += [0] * (8 - len(fields))
            total = sum(fields)
            idle = fields[3] + fields[4]
            cpus[parts[0]] = (total - idle, total, fields[7])
        elif line.startswith(_SCALARS):
            key, _, value = line.partition(" ")
            scalars[key] = int(value)
    return cpus, scalars


def _pgfault(text: str) -> int | None:
    """Cumulative page faults from ``/proc/vmstat``."""
    at = text.find("\npgfault ")
    if at < 0:
        return None
    end = text.find("\n", at + 9)
    return int(text[at + 9 : end if end > 0 else None])


def _process_jiffies(text: str) -> int | None:
    """User plus system jiffies of a process, from its ``/proc/<pid>/stat`` line."""
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 13:
        return None
    return int(fields[11]) + int(fields[12])


def _psi_some_total_us(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("some"):
            for part in line.split():
                if part.startswith("total="):
                    return int(part[6:])
    return None


class CpuSampler(Sampler):
    """Samples ``/proc`` CPU, scheduler and memory-pressure signals.

    Parameters
    ----------
    hz
        Reads per second.
    seconds
        History kept, in seconds.
    proc
        Root of the proc file system (for a container's bind mount).
    own_pids
        The workload's processes (called at each read); with it, ``other_cpu`` is recorded.
    foreign_span_s
        Seconds over which ``other_cpu`` is averaged.

    Examples
    --------
    >>> sampler = CpuSampler(hz=50)
    >>> sampler.sample_once(); time.sleep(0.05); sampler.sample_once()
    >>> signals = sampler.buffer.samples()[-1][2]
    >>> 0.0 <= signals["cpu_util"] <= 1.0, signals["run_queue"] >= 0
    (True, True)
    """

    def __init__(self, hz: float = DEFAULT_HZ, *, seconds: float = 60.0, proc: str | Path = "/proc",
                 own_pids: Callable[[], Iterable[int]] | None = None, foreign_span_s: float = 0.5) -> None:
        super().__init__(hz, seconds=seconds, name="cpu-sampler")
        if not foreign_span_s >= 0:
            raise ValueError(f"foreign_span_s must be >= 0, got {foreign_span_s!r}")
        proc = Path(proc)
        self._proc = proc
        self.own_pids = own_pids
        self.foreign_span_s = foreign_span_s
        self._pid_files: dict[int, _ProcFile] = {}
        self._span: deque[_Counters] = deque()
        self._stat = _ProcFile(proc / "stat")
        self._vmstat = _ProcFile(proc / "vmstat")
        self._psi_cpu = _ProcFile(proc / "pressure" / "cpu")
        self._psi_mem = _ProcFile(proc / "pressure" / "memory")
        self._prev: _Counters | None = None
        self._last_cpu: dict[str, float] = {}

    def _counters(self) -> _Counters:
        counters = _Counters(t=time.monotonic())
        stat = self._stat.read()
        if stat is not None:
            counters.cpus, counters.scalars = _cpu_times(stat)
        vm = self._vmstat.read()
        counters.pgfault = _pgfault(vm) if vm is not None else None
        text = self._psi_cpu.read()
        counters.psi_cpu = _psi_some_total_us(text) if text is not None else None
        text = self._psi_mem.read()
        counters.psi_mem = _psi_some_total_us(text) if text is not None else None
        if self.own_pids is not None:
            counters.own = self._own_jiffies(set(self.own_pids()))
        return counters

    def _own_jiffies(self, pids: set[int]) -> dict[int, int]:
        """Jiffies of each of ``pids`` still alive (their ``/proc`` files kept open)."""
        for gone in set(self._pid_files) - pids:
            self._pid_files.pop(gone).close()
        out: dict[int, int] = {}
        for pid in pids:
            f = self._pid_files.get(pid)
            if f is None:
                f = self._pid_files[pid] = _ProcFile(self._proc / str(pid) / "stat")
            text = f.read()
            jiffies = _process_jiffies(text) if text else None
            if jiffies is not None:
                out[pid] = jiffies
        return out

    def _other_cpu(self, cur: _Counters) -> float | None:
        """Cores busy with processes other than ``own_pids`` since the oldest read of the span."""
        span = self._span
        span.append(cur)
        while len(span) > 2 and cur.t - span[1].t >= self.foreign_span_s:
            span.popleft()
        then = span[0]
        if then is cur or cur.own is None or then.own is None or "cpu" not in cur.cpus or "cpu" not in then.cpus:
            return None
        busy = cur.cpus["cpu"][0] - then.cpus["cpu"][0]
        total = cur.cpus["cpu"][1] - then.cpus["cpu"][1]
        if total <= 0:
            return None
        own = sum(j - then.own[pid] for pid, j in cur.own.items() if pid in then.own)
        cores = sum(1 for name in cur.cpus if name != "cpu") or 1
        return max(0.0, (busy - own) / total * cores)

    def read(self) -> dict[str, float]:
        """One reading: run queue and blocked tasks now, and rates since the previous read.

        The rates (CPU and per-core utilisation, steal, context switches, page
        faults, CPU and memory pressure) are missing on the first read.
        """
        cur = self._counters()
        prev, self._prev = self._prev, cur
        out: dict[str, float] = {}
        if "procs_running" in cur.scalars:
            out["run_queue"] = float(max(0, cur.scalars["procs_running"] - 1))
            out["procs_blocked"] = float(cur.scalars.get("procs_blocked", 0))
        dt = cur.t - prev.t if prev is not None else 0.0
        if prev is None or dt <= 0:
            return out
        # A core whose jiffies did not advance (a read within one tick) keeps its last value.
        self._last_cpu = {**self._last_cpu, **self._cpu_signals(prev.cpus, cur.cpus)}
        out.update(self._last_cpu)
        if self.own_pids is not None:
            other = self._other_cpu(cur)
            if other is not None:
                out["other_cpu"] = other
        if "ctxt" in cur.scalars and "ctxt" in prev.scalars:
            out["ctxt_kps"] = (cur.scalars["ctxt"] - prev.scalars["ctxt"]) / dt / 1e3
        if cur.pgfault is not None and prev.pgfault is not None:
            out["pgfault_kps"] = (cur.pgfault - prev.pgfault) / dt / 1e3
        for name, now_us, then_us in (
            ("cpu_pressure", cur.psi_cpu, prev.psi_cpu),
            ("mem_pressure", cur.psi_mem, prev.psi_mem),
        ):
            if now_us is not None and then_us is not None:
                out[name] = min(1.0, max(0.0, (now_us - then_us) / 1e6 / dt))
        return out

    def close(self) -> None:
        """Close the open ``/proc`` files."""
        for f in (self._stat, self._vmstat, self._psi_cpu, self._psi_mem, *self._pid_files.values()):
            f.close()
        self._pid_files.clear()

    @staticmethod
    def _cpu_signals(
        prev: dict[str, tuple[int, int, int]], cur: dict[str, tuple[int, int, int]]
    ) -> dict[str, float]:
        out: dict[str, float] = {}
        cores: list[float] = []
        for name, (busy, total, steal) in cur.items():
            if name not in prev:
                continue
            b0, t0, s0 = prev[name]
            d_total = total - t0
            if d_total <= 0:
                continue
            util = min(1.0, max(0.0, (busy - b0) / d_total))
            if name == "cpu":
                out["cpu_util"] = util
                out["cpu_steal"] = min(1.0, max(0.0, (steal - s0) / d_total))
            else:
                cores.append(util)
                if len(cores) <= MAX_CORE_SIGNALS:
                    out[f"{name}_util"] = util
        if len(cores) > 1:
            out["cpu_util_max"] = max(cores)
        return out
