"""How long a thread waits for the GIL beside a busy one, by how often the busy one drops it.

A probe thread sleeps 0.2 ms and needs the GIL to wake; its lateness is how long it waited for
the GIL. Beside it, for ``seconds`` each, a busy thread runs one of these loops (the GIL's
switch interval at :data:`predictor.runtime.gil.DEFAULT_SWITCH_INTERVAL_MS`, as ``predictor serve``):

* ``pure Python``: never drops the GIL, so the probe is handed it after one switch interval;
* ``numpy every ~3 µs`` and ``numpy every ~150 µs``: the same Python with a small
  ``np.bincount`` (which drops and retakes the GIL, as most numpy array operations do) every few
  microseconds, or every ~150 (less often than the interval: what the learner's numpy-heavy
  stages do): each drop restarts the probe's wait, so it is handed the GIL only if it wins the
  race at a drop;
* ``numpy every ~150 µs, pausing every 1 ms``: the same, with :func:`predictor.runtime.gil_yield.point`
  between iterations and the process set to pause every 1 ms (``--learner-yield-ms 1``).

Measured on the shared 2-core machine (2026-11-24, 3 s each; lateness beyond the 0.2 ms asked):
pure Python p50 0.69 ms, p99 0.93, max 2.9 (3,337 wakes); numpy every ~3 µs p50 0.22, p99 1.3
(the probe often wins a race); numpy every ~150 µs p50 **688 ms**, max 1.95 s (4 wakes in 3 s);
the same pausing every 1 ms p50 1.0 ms, p99 2.2, max 9.1 (2,415 wakes).

Run: ``PYTHONPATH=$PWD .venv/bin/python -m experiments.bench.gil_starvation``
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

from experiments.common import finish, start
from predictor.runtime import gil_yield
from predictor.runtime.gil import DEFAULT_SWITCH_INTERVAL_MS


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    seconds: float = 3.0
    probe_sleep_ms: float = 0.2


_INDEX = np.array([1, 5, 9])


def _python(n: int = 200) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def _numpy_often() -> None:
    _python()
    np.bincount(_INDEX)


def _numpy_rarely() -> None:
    for _ in range(50):
        _python()
    np.bincount(_INDEX)


def _numpy_rarely_pausing() -> None:
    _numpy_rarely()
    gil_yield.point()


LOOPS: dict[str, tuple[Callable[[], object], float]] = {
    "pure Python": (_python, 0.0),
    "numpy every ~3 µs": (_numpy_often, 0.0),
    "numpy every ~150 µs": (_numpy_rarely, 0.0),
    "numpy every ~150 µs, pausing every 1 ms": (_numpy_rarely_pausing, 1.0),
}


def lateness(work: Callable[[], object], seconds: float, sleep_s: float) -> np.ndarray:
    """The probe's lateness (ms) at each wake while another thread runs ``work`` back to back."""
    stop = threading.Event()
    late: list[float] = []

    def busy() -> None:
        while not stop.is_set():
            work()

    def probe() -> None:
        while not stop.is_set():
            begin = time.perf_counter()
            time.sleep(sleep_s)
            late.append(time.perf_counter() - begin - sleep_s)

    threads = [threading.Thread(target=busy), threading.Thread(target=probe)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return 1e3 * np.array(late)


def main() -> None:
    """Each loop beside the probe; prints the probe's lateness percentiles."""
    config, out = start("gil_starvation", Config(), __doc__.splitlines()[0])
    sys.setswitchinterval(DEFAULT_SWITCH_INTERVAL_MS / 1e3)
    results = {}
    for name, (work, period_ms) in LOOPS.items():
        begin = time.perf_counter()
        calls = 0
        while time.perf_counter() - begin < 0.2:
            work()
            calls += 1
        with gil_yield.yielding(period_ms):
            late = lateness(work, config.seconds, config.probe_sleep_ms / 1e3)
        row = {"call_us": 0.2 / calls * 1e6, "wakes": int(late.size),
               **{f"p{q:g}_ms": float(np.percentile(late, q)) for q in (50, 99)}, "max_ms": float(late.max())}
        results[name] = row
        print(f"{name:<42} a call {row['call_us']:6.1f} µs   probe late p50 {row['p50_ms']:8.2f}  "
              f"p99 {row['p99_ms']:8.2f}  max {row['max_ms']:8.2f} ms   wakes {row['wakes']}", flush=True)
    finish(out, {"config": dataclasses.asdict(config), "results": results})


if __name__ == "__main__":
    main()
