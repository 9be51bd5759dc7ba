"""What runs on an inference replica: its co-location state, as reported and as the router counts it.

An inference replica reports, through Ray Serve's routing stats (its ``record_routing_stats``
method, polled by the controller every ``request_routing_stats_period_s``), a
:class:`ColocationState`: the device it runs on, its device kind, the solo latency it profiled
for each (model, batch size) it serves, and the batches running there now. The stats reach a
router late (a period, plus the controller's broadcast), so the router also keeps a
:class:`Ledger` of the requests it sent itself and that have not completed; the co-runners
of a candidate are the union of both, each batch counted once (:meth:`Ledger.co_runners`).

Examples
--------
>>> state = ColocationState("cpu0", "cpu", {"mlp:2": 4.0},
...     (RunningBatch("r1", "mlp", 2, started_s=100.0, expected_ms=4.0),))
>>> ColocationState.from_stats(state.to_stats()) == state
True
>>> ledger = Ledger()
>>> ledger.sent("replica-a", "i1", RunningBatch("r2", "resnet", 4, started_s=100.001, expected_ms=10.0))
>>> [(c.model, c.remaining_ms) for c in ledger.co_runners("replica-a", state, now_s=100.002)]
[('resnet', 9.0), ('mlp', 2.0)]
>>> ledger.completed("i1")
>>> [c.model for c in ledger.co_runners("replica-a", state, now_s=100.002)]
['mlp']
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from predictor.service import PlannedCoRunner

MIN_REMAINING_SHARE = 0.05
"""A batch past its expected end is taken to have this share of its expected time left (it still runs)."""

STATS_KEY = "colocation"
"""The key of the co-location state in a replica's routing stats."""


def solo_key(model: str, batch_size: int) -> str:
    """The key of a (model, batch size) in :attr:`ColocationState.solo_ms`."""
    return f"{model}:{batch_size}"


@dataclass(frozen=True, slots=True)
class RunningBatch:
    """One batch running on a replica.

    Attributes
    ----------
    request_id
        The request's own id (the same in the replica's report and in the router's ledger).
    model, batch_size
        What runs.
    started_s
        When it started (wall clock, Unix seconds: comparable across the processes of one machine).
    expected_ms
        Its expected latency (the router's prediction, or the replica's solo profile).
    """

    request_id: str
    model: str
    batch_size: int
    started_s: float
    expected_ms: float

    def remaining_ms(self, now_s: float) -> float:
        """Expected time left at ``now_s`` (never below :data:`MIN_REMAINING_SHARE` of the expected time)."""
        left = self.expected_ms - (now_s - self.started_s) * 1000.0
        return max(round(left, 9), MIN_REMAINING_SHARE * self.expected_ms)

    def co_runner(self, now_s: float, window_ms: float | None = None) -> PlannedCoRunner:
        """This batch as a co-runner of a planned batch: by its expected time left, or, given the planned
        batch's expected window (``window_ms``, e.g. its solo latency), by the share of that window it
        overlaps (no fixed point of window and overlap to solve: cheaper for a router)."""
        remaining = self.remaining_ms(now_s)
        if window_ms is None:
            return PlannedCoRunner(self.model, self.batch_size, remaining_ms=remaining)
        return PlannedCoRunner(self.model, self.batch_size, overlap=min(1.0, remaining / window_ms))


@dataclass(frozen=True, slots=True)
class ColocationState:
    """What an inference replica reports: where it runs and what runs there.

    Attributes
    ----------
    device, device_kind
        The device (a replica's own cores) and its kind, as the service knows them.
    solo_ms
        Profiled solo latency per :func:`solo_key`.
    running
        The batches running now.
    """

    device: str
    device_kind: str
    solo_ms: Mapping[str, float] = field(default_factory=dict)
    running: tuple[RunningBatch, ...] = ()

    def to_stats(self) -> dict[str, Any]:
        """The routing stats a replica returns from ``record_routing_stats`` (plain values only)."""
        return {STATS_KEY: {
            "device": self.device,
            "device_kind": self.device_kind,
            "solo_ms": dict(self.solo_ms),
            "running": [[b.request_id, b.model, b.batch_size, b.started_s, b.expected_ms] for b in self.running],
        }}

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any] | None) -> ColocationState | None:
        """The state in a replica's routing stats (``None``: none reported yet).

        Raises ``ValueError`` naming the field that is malformed.
        """
        if not stats or STATS_KEY not in stats:
            return None
        raw = stats[STATS_KEY]
        device = raw.get("device")
        if not isinstance(device, str) or not device:
            raise ValueError(f"{STATS_KEY}.device must be a non-empty string, got {device!r}")
        solo = {}
        for key, value in dict(raw.get("solo_ms", {})).items():
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{STATS_KEY}.solo_ms[{key!r}] must be a finite number > 0, got {value!r}")
            solo[str(key)] = float(value)
        running = []
        for i, entry in enumerate(raw.get("running", [])):
            try:
                request_id, model, batch_size, started_s, expected_ms = entry
                running.append(RunningBatch(str(request_id), str(model), int(batch_size), float(started_s),
                                            float(expected_ms)))
            except (TypeError, ValueError):
                raise ValueError(f"{STATS_KEY}.running[{i}] must be [request_id, model, batch_size, "
                                 f"started_s, expected_ms], got {entry!r}") from None
        return cls(device, str(raw.get("device_kind", "")), solo, tuple(running))


class Ledger:
    """The requests a router sent and that have not completed, per replica (thread-safe).

    Parameters
    ----------
    remember_completed
        How many completed request ids are remembered, so that a replica's late report of a
        batch that has already completed does not count it as running.
    """

    def __init__(self, remember_completed: int = 4096):
        self._open: dict[str, dict[str, RunningBatch]] = collections.defaultdict(dict)
        self._where: dict[str, tuple[str, str]] = {}  # internal id -> (replica, request id)
        self._done: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._remember = remember_completed
        self._lock = threading.Lock()

    def sent(self, replica: str, internal_id: str, batch: RunningBatch) -> None:
        """The router sent ``batch`` to ``replica`` (``internal_id``: Serve's id of the request)."""
        with self._lock:
            self._open[replica][batch.request_id] = batch
            self._where[internal_id] = (replica, batch.request_id)

    def completed(self, internal_id: str) -> None:
        """The request Serve calls ``internal_id`` completed (unknown ids are ignored)."""
        with self._lock:
            where = self._where.pop(internal_id, None)
            if where is None:
                return
            replica, request_id = where
            self._open[replica].pop(request_id, None)
            self._done[request_id] = None
            while len(self._done) > self._remember:
                self._done.popitem(last=False)

    def in_flight(self, replica: str) -> int:
        """How many requests sent to ``replica`` have not completed."""
        with self._lock:
            return len(self._open.get(replica, {}))

    def co_runners(self, replica: str, state: ColocationState | None, now_s: float,
                   window_ms: float | None = None) -> list[PlannedCoRunner]:
        """What runs on ``replica`` at ``now_s``: this router's open requests, then the reported
        batches that are neither among them nor known completed, each once (``window_ms``: see
        :meth:`RunningBatch.co_runner`)."""
        with self._lock:
            mine = self._open.get(replica, {})
            batches = list(mine.values())
            if state is not None:
                batches += [b for b in state.running if b.request_id not in mine and b.request_id not in self._done]
        return [b.co_runner(now_s, window_ms) for b in batches]
