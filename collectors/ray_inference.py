"""An inference deployment of the project's CPU models that reports its co-location state.

Each :class:`InferenceReplica` is one "device": with ``pin_cores`` its process is pinned to
one CPU core (replica rank ``i`` to the ``i``-th allowed core) and torch runs one thread, so the
batches it runs at once share that core and slow each other down, as co-located batches on
an accelerator do. It serves :class:`InferenceRequest` objects (any of its models, at any
profiled batch size), and:

* reports what it runs through Serve's routing stats (:meth:`InferenceReplica.record_routing_stats`,
  a :class:`~predictor.ray_serve.colocation.ColocationState`);
* turns its batch begins and ends into ``coloc/v1`` records with co-runners and overlaps
  (:class:`collectors.tracker.Tracker`) and sends them to the learner actor, if one is named,
  so the service learns this deployment's interference as it serves.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

from ray import serve

from collectors.tracker import Tracker
from predictor.ray_serve.colocation import ColocationState, RunningBatch, solo_key
from predictor.ray_serve.learner import learner_named
from predictor.ray_serve.requests import InferenceRequest, InferenceResult
from predictor.records.record import Record, record_to_dict

FLUSH_RECORDS = 32
"""Observations are sent to the learner in groups of this many ..."""
FLUSH_S = 0.2
"""... or once this many seconds have passed since the last group (whichever comes first)."""


def _pin(rank: int, pin_cores: bool) -> str:
    """Pin this process to one allowed core (by ``rank``) when asked; returns the device name."""
    if not pin_cores:
        return f"replica{rank}"
    cores = sorted(os.sched_getaffinity(0))
    core = cores[rank % len(cores)]
    os.sched_setaffinity(0, {core})
    return f"cpu{core}"


@serve.deployment(max_ongoing_requests=4, ray_actor_options={"num_cpus": 0})
class InferenceReplica:
    """A replica running the project's CPU models (:mod:`collectors.models`), one device each.

    Parameters
    ----------
    models
        Model names (:func:`collectors.models.model_names`).
    batch_sizes
        The batch sizes served; each (model, batch size) is profiled alone at start.
    device_kind
        The device kind reported to the service.
    learner
        Name of the learner actor to send observations to (empty: none).
    pin_cores
        Pin the replica to one core (see the module documentation).
    profile_runs
        Solo runs per (model, batch size) at start; their median is the solo latency.
    """

    def __init__(self, models: Sequence[str], batch_sizes: Sequence[int], device_kind: str = "cpu",
                 learner: str = "", pin_cores: bool = True, profile_runs: int = 5):
        import torch

        from collectors.models import build, example_input

        if not models or not batch_sizes:
            raise ValueError("models and batch_sizes must be non-empty")
        torch.set_num_threads(1)
        self._torch = torch
        rank = serve.get_replica_context().rank
        self.device = _pin(int(getattr(rank, "rank", rank)), pin_cores)
        self.device_kind = device_kind
        self.nets = {name: build(name)[0] for name in models}
        self.inputs = {(name, bs): example_input(name, bs) for name in models for bs in batch_sizes}
        self.solo_ms = {solo_key(*key): self._profile(key, profile_runs) for key in self.inputs}
        self.running: dict[str, RunningBatch] = {}
        self._lock = threading.Lock()
        self.learner = learner_named(learner) if learner else None
        self._records: list[dict[str, Any]] = []
        self._flushed = time.monotonic()
        self.tracker = Tracker(self._emit, source="cpu", lag_s=0.0)

    def _run(self, key: tuple[str, int]) -> float:
        start = time.perf_counter()
        with self._torch.inference_mode():
            self.nets[key[0]](self.inputs[key])
        return (time.perf_counter() - start) * 1000.0

    def _profile(self, key: tuple[str, int], runs: int) -> float:
        self._run(key)  # warm-up
        return statistics.median(self._run(key) for _ in range(max(runs, 1)))

    def _emit(self, record: Record) -> None:
        self._records.append(record_to_dict(record))

    def _flush(self, force: bool = False) -> None:
        """Send the pending observations to the learner (call under the lock)."""
        now = time.monotonic()
        if self._records and (force or len(self._records) >= FLUSH_RECORDS or now - self._flushed >= FLUSH_S):
            if self.learner is not None:
                self.learner.observe.remote(self._records)
            self._records = []
            self._flushed = now

    def __call__(self, request: InferenceRequest) -> InferenceResult:
        """Run one batch; co-located with whatever else this replica runs."""
        key = (request.model, request.batch_size)
        if key not in self.inputs:
            raise ValueError(f"model/batch_size {request.model!r}/{request.batch_size} is not served here; "
                             f"served: {sorted(self.solo_ms)}")
        solo = self.solo_ms[solo_key(*key)]
        with self._lock:
            co_runners = len(self.running)
            self.running[request.request_id] = RunningBatch(request.request_id, request.model, request.batch_size,
                                                            time.time(), solo)
            begin = time.monotonic()
            self.tracker.begin(request.request_id, self.device, request.model, request.batch_size, begin,
                               solo_latency_ms=solo, device_kind=self.device_kind)
        try:
            latency = self._run(key)
        finally:
            with self._lock:
                self.running.pop(request.request_id, None)
                self.tracker.end(request.request_id, begin + latency / 1000.0, latency_ms=latency)
                self.tracker.poll()
                self._flush()
        return InferenceResult(request.request_id, self.device, latency, co_runners)

    def flush(self) -> int:
        """Emit and send every finished batch's observation now; returns how many are still running."""
        with self._lock:
            self.tracker.poll(now=time.monotonic() + 1.0)
            self._flush(force=True)
            return len(self.running)

    def solo_profile(self) -> dict[str, float]:
        """The solo latency (ms) profiled at start, per :func:`~predictor.ray_serve.colocation.solo_key`."""
        return dict(self.solo_ms)

    def record_routing_stats(self) -> dict[str, Any]:
        """Serve's routing stats hook: this replica's co-location state."""
        with self._lock:
            running = tuple(self.running.values())
        return ColocationState(self.device, self.device_kind, dict(self.solo_ms), running).to_stats()

