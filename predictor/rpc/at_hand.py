"""The items of a stream taken as they arrive, many at a time: what one message of a client stream
carries (:meth:`InterferenceClient.report_observations <predictor.rpc.client.InterferenceClient.report_observations>`).

A source whose items are all at hand (a log read from disk) fills every message; a live source (a
collector's batches, each as it ends) never has an item held back waiting for the next one.

>>> [len(chunk) for chunk in at_hand(iter(range(10)), 4)]  # all at hand: full chunks
[4, 4, 2]
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_END = object()
_PUT_WAIT_S = 0.05


class _Raised:
    """What the source raised, handed from the reading thread to the taker."""

    def __init__(self, error: BaseException):
        self.error = error


def at_hand(items: Iterable[T], most: int, ahead: int | None = None) -> Iterator[list[T]]:
    """``items`` in order, in lists of 1 to ``most``: each list holds what had arrived when it was
    taken, waiting only for its first item.

    The items are read on a thread of their own, at most ``ahead`` (default ``4 * most``) before the
    taker. An exception the source raises is raised here, after the items before it. Closing the
    generator (or dropping it) stops the reading at the source's next item.
    """
    if most < 1:
        raise ValueError(f"most must be >= 1, got {most!r}")
    waiting: queue.Queue = queue.Queue(maxsize=ahead or 4 * most)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                waiting.put(item, timeout=_PUT_WAIT_S)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in items:
                if not put(item):
                    return
        except BaseException as error:  # noqa: BLE001 - raised again on the taker's side
            put(_Raised(error))
            return
        put(_END)

    threading.Thread(target=read, name="at-hand reader", daemon=True).start()
    try:
        while True:
            item = waiting.get()
            chunk: list[T] = []
            while item is not _END and type(item) is not _Raised:
                chunk.append(item)  # type: ignore[arg-type]
                if len(chunk) == most:
                    break
                try:
                    item = waiting.get_nowait()
                except queue.Empty:
                    break
            if chunk:
                yield chunk
            if item is _END:
                return
            if type(item) is _Raised:
                raise item.error  # type: ignore[union-attr]
    finally:
        stop.set()
