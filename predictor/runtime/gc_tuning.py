"""The cyclic garbage collector in a serving process: young objects collected less often, start-up frozen.

CPython collects its youngest generation after every 700 net allocations of container objects,
and the whole heap after ten collections of the middle one (when enough new objects survived).
A service that learns allocates many short-lived containers per observation (records, their
co-runners, the block's lists) over a heap of long-lived ones (the model, the calibrators, the
live view): with Python's thresholds the learner collects young objects often, and every few
seconds a full collection traverses everything start-up built, holding the GIL while no answer
moves. So a serving process collects the youngest generation after
:data:`DEFAULT_YOUNG_THRESHOLD` allocations (:func:`set_young_threshold`, ``--gc-young-threshold``)
and freezes what start-up built (:func:`freeze_startup`; ``gc.freeze``: never traversed again).

Objects frozen are still freed by reference counting; only a reference cycle among them would
outlive its use (the model's state is replaced, not cycled).

Examples
--------
>>> import gc
>>> before = gc.get_threshold()
>>> with collector(10_000):
...     gc.get_threshold()[0]
10000
>>> gc.get_threshold() == before
True
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator

DEFAULT_YOUNG_THRESHOLD = 10_000
"""Allocations between two collections of the youngest generation (Python's own: 700)."""


def check_young_threshold(value: int) -> None:
    """``ValueError`` naming ``--gc-young-threshold`` unless ``0 <= value <= 10,000,000``."""
    if not 0 <= value <= 10_000_000:
        raise ValueError(f"--gc-young-threshold must be 0 (Python's collector as it is) or up to 10,000,000, "
                         f"got {value!r}")


def set_young_threshold(young: int) -> tuple[int, ...]:
    """Collect the youngest generation after ``young`` allocations (0: leave Python's thresholds as
    they are), for the rest of the process; returns the thresholds before."""
    previous = gc.get_threshold()
    if young:
        gc.set_threshold(young, *previous[1:])
    return previous


@contextlib.contextmanager
def collector(young: int) -> Iterator[None]:
    """Run the block with :func:`set_young_threshold`, then restore the thresholds and unfreeze what
    :func:`freeze_startup` froze in it."""
    previous = set_young_threshold(young)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Run the block with no cyclic collection (reference counting frees as ever), then the collector
    as it was: for a block that builds many containers alive to its end and no reference cycles
    (a log's decoded rows, read whole), which every collection meanwhile would traverse for nothing.

    >>> with paused():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def freeze_startup(young: int, logger: logging.Logger | None = None) -> int:
    """Once start-up is done (the model restored or warm-started): collect, then freeze every object
    alive, so that later full collections traverse only what was made since. Does nothing when
    ``young`` is 0 (Python's collector as it is). Returns how many objects are frozen; ``logger``
    is told the collector's thresholds and that count, as each server process starts."""
    if young:
        gc.collect()
        gc.freeze()
    frozen = gc.get_freeze_count()
    if logger is not None:
        logger.info("garbage collector: thresholds %s, %s start-up objects frozen",
                    ",".join(map(str, gc.get_threshold())), f"{frozen:,}")
    return frozen
