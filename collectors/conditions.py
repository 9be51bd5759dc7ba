"""What else ran on the machine while a dataset was recorded.

A co-location dataset is only as clean as the machine it was recorded on: any
other job's CPU use shows as unexplained slowdown. :class:`ConditionsMonitor`
watches the recording from outside the measured work: the load average before
and (sampled once a second) during the run, and the CPU time the whole machine
spent busy against the CPU time of this process and its children (the workers).
The difference is CPU time some *other* process used: the figure that says
whether the recording was clean.

Examples
--------
>>> monitor = ConditionsMonitor(interval_s=0.05).start()
>>> conditions = monitor.stop()
>>> conditions.cpu_count >= 1 and len(conditions.loadavg_before) == 3
True
"""

from __future__ import annotations

import dataclasses
import os
import resource
import statistics
import threading
import time
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class RecordingConditions:
    """The machine's load around a recording.

    Attributes
    ----------
    loadavg_before
        1-, 5- and 15-minute load averages when the recording started.
    loadavg_during
        ``min``, ``mean`` and ``max`` of the 1-minute load average sampled during it.
    busy_cores
        Mean number of cores busy (all processes) over the recording.
    own_cores
        Mean number of cores used by this process and its finished children.
    other_cores
        ``busy_cores - own_cores`` (at least 0): cores used by other processes.
    cpu_count
        Cores of the machine.
    wall_s
        Length of the watched interval.
    """

    loadavg_before: tuple[float, float, float]
    loadavg_during: dict[str, float]
    busy_cores: float
    own_cores: float
    other_cores: float
    cpu_count: int
    wall_s: float

    def as_dict(self) -> dict[str, object]:
        """The conditions as JSON-ready values."""
        return dataclasses.asdict(self)

    @property
    def clean(self) -> bool:
        """Whether other processes used less than a tenth of a core on average."""
        return self.other_cores < 0.1


def busy_cpu_seconds(proc: str | Path = "/proc") -> float:
    """CPU seconds all cores have spent busy since boot (``/proc/stat``: all but idle and iowait)."""
    fields = Path(proc, "stat").read_text().split("\n", 1)[0].split()
    ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children."""
    self_, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return self_.ru_utime + self_.ru_stime + children.ru_utime + children.ru_stime


class ConditionsMonitor:
    """Samples the load average in a background thread between :meth:`start` and :meth:`stop`.

    Parameters
    ----------
    interval_s
        Seconds between load-average samples.
    proc
        Where ``/proc`` is mounted.
    """

    def __init__(self, interval_s: float = 1.0, proc: str | Path = "/proc") -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = interval_s
        self.proc = Path(proc)
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._before: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self._t0 = self._busy0 = self._own0 = 0.0

    def start(self) -> ConditionsMonitor:
        """Read the starting figures and begin sampling; returns ``self``."""
        self._before = os.getloadavg()
        self._t0, self._busy0, self._own0 = time.monotonic(), busy_cpu_seconds(self.proc), own_cpu_seconds()
        self._thread = threading.Thread(target=self._sample, name="conditions", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._samples.append(os.getloadavg()[0])
            self._stop.wait(self.interval_s)

    def stop(self) -> RecordingConditions:
        """Stop sampling and return the conditions of the watched interval."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        wall = max(time.monotonic() - self._t0, 1e-9)
        busy = (busy_cpu_seconds(self.proc) - self._busy0) / wall
        own = (own_cpu_seconds() - self._own0) / wall
        samples = self._samples or [os.getloadavg()[0]]
        return RecordingConditions(
            loadavg_before=tuple(self._before),  # type: ignore[arg-type]
            loadavg_during={"min": min(samples), "mean": statistics.fmean(samples), "max": max(samples)},
            busy_cores=busy,
            own_cores=own,
            other_cores=max(busy - own, 0.0),
            cpu_count=os.cpu_count() or 1,
            wall_s=wall,
        )
