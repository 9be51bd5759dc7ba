"""Two service states learned on disjoint streams (two shards) merged into one.

:func:`merge_states` takes the payloads of two snapshots (:meth:`ServiceState.state_payload
<predictor.service.state.ServiceState.state_payload>`, read back by :func:`~predictor.snapshot.read_snapshot`)
and returns the payload of one state holding what both learned; :func:`merge_snapshots` does it from
and to snapshot files (``predictor state merge A B -o C``), writing nothing unless the whole merge
succeeded. Part by part:

* **the predictor** (``rls``): each model's information form added, the first's evidence discounted
  by ``forgetting`` to the power of the second's updates (:func:`~predictor.regressors.merge.merge_discounted`:
  the learner that saw the first's stream then the second's; exact with ``forgetting=1`` and no trace
  bound reached, otherwise the approximation ``docs/design.md`` (Merging shards) measures); the solo
  profile (the second's profiled latencies where both have one, as the learner of both streams in
  turn keeps the latest; means of latencies alone weighted by their counts; lowest latencies),
  the plausible slowdown range, the residual scales (weighted by their counts) and the counts;
* **the calibrators**: cell by cell (:mod:`predictor.calibration.merge`): a cell one side holds is
  taken whole (disjoint device kinds merge exactly), one both hold gets a sketch of both windows;
* **per device kind or device** (outlier gates, error monitor, signal views, the live view's
  devices): the union, the first's where both hold one;
* **sums** (overlap statistics, counters, the sequence position): added;
* **the records taken in** (exactly-once learning): per producer, the union of the sequence numbers
  taken (the highest of both, the holes neither took).

Refused, with a :class:`MergeError` naming what differs: snapshots of other predictors or predictor
settings (feature sets, forgetting, ...), calibrators configured differently, a predictor other than
``rls``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from predictor import snapshot
from predictor.calibration.merge import merge_conformal_calibrators, merge_shape_calibrators
from predictor.predictors.base import MAX_SLOWDOWN, MIN_SLOWDOWN
from predictor.predictors.rls import RlsPredictor
from predictor.regressors.merge import merge_discounted
from predictor.service.durability.dedup import Deduplicator, ProducerWindow
from predictor.service.state import SNAPSHOT_FILE


class MergeError(ValueError):
    """Two states that cannot be merged; the message names what differs."""


def merge_snapshots(first: str | Path, second: str | Path, out: str | Path) -> dict:
    """Merge the snapshots ``first`` and ``second`` (files, or state folders holding one) into the
    snapshot file ``out``, written atomically once the merge succeeded; returns its header.

    A state folder's observation log is not read: stop its server first (a graceful stop writes a
    final snapshot covering every record learned), else the records logged after its last snapshot
    are not in the merge.
    """
    (a, head_a), (b, head_b) = (snapshot.read_snapshot(_snapshot_path(p)) for p in (first, second))
    if head_a["predictor"] != head_b["predictor"]:
        raise MergeError(f"different predictors: {head_a['predictor']!r} and {head_b['predictor']!r}")
    merged = merge_states(a, b)
    return snapshot.write_payload(out, snapshot.dump_state(merged), predictor=head_a["predictor"],
                                  observations=merged["predictor"].n_learned, extra={"log_sequence": 0})


def _snapshot_path(path: str | Path) -> Path:
    path = Path(path)
    return path / SNAPSHOT_FILE if path.is_dir() else path


def merge_states(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of a state holding what the payloads ``first`` and ``second`` learned (see the module)."""
    for state in (first, second):
        if not isinstance(state, Mapping) or not {"predictor", "calibrator", "monitor"} <= state.keys():
            raise MergeError("a payload is not a service state")
    try:
        out: dict[str, Any] = {
            "predictor": merge_predictors(first["predictor"], second["predictor"]),
            "calibrator": merge_conformal_calibrators(first["calibrator"], second["calibrator"]),
        }
    except ValueError as exc:
        raise MergeError(str(exc)) from None
    admission = first.get("admission")
    if admission is not None and second.get("admission") is not None:
        admission = copy.deepcopy(admission)
        try:
            admission.calibrator = merge_shape_calibrators(first["admission"].calibrator,
                                                           second["admission"].calibrator)
        except ValueError as exc:
            raise MergeError(f"admission: {exc}") from None
        admission.monitor = _union(first["admission"].monitor, second["admission"].monitor,
                                   "_counts", "_totals", "_recent")
        admission.n_linked += second["admission"].n_linked
    out["admission"] = admission
    monitor = _union(first["monitor"], second["monitor"], "_kinds")
    monitor.n_observations += second["monitor"].n_observations
    monitor.alarms.extend(second["monitor"].alarms)
    out["monitor"] = monitor
    out["devices"] = {**second.get("devices", {}), **first.get("devices", {})}
    gates_a, gates_b = first.get("gates"), second.get("gates")
    if (gates_a is None) != (gates_b is None):
        raise MergeError("one state has outlier gates, the other none")
    if gates_a is not None:
        for name in ("k", "min_ratio", "warmup"):
            if getattr(gates_a, name) != getattr(gates_b, name):
                raise MergeError(f"outlier gates with different {name}: {getattr(gates_a, name)!r} and "
                                 f"{getattr(gates_b, name)!r}")
        gates_a = _union(gates_a, gates_b, "_gates")
        gates_a.n_rejected += gates_b.n_rejected
    out["gates"] = gates_a
    out["filling"] = merge_fillings(first["filling"], second["filling"]) if "filling" in first else None
    out["dedup"] = merge_dedup(first["dedup"], second["dedup"]) if "dedup" in first else None
    out["sequence"] = first.get("sequence", 0) + second.get("sequence", 0)
    out["replay_base"] = None  # taken afresh from the merged predictor when it learns next
    return out


def _union(first: Any, second: Any, *tables: str) -> Any:
    """A copy of ``first`` whose dicts ``tables`` also hold the entries of ``second``'s they lack."""
    out = copy.deepcopy(first)
    for table in tables:
        mine = getattr(out, table)
        for key, value in getattr(second, table).items():
            if key not in mine:
                mine[key] = copy.deepcopy(value)
    return out


def merge_predictors(first: Any, second: Any) -> RlsPredictor:
    """An ``rls`` predictor holding what both learned (see the module); :class:`MergeError` when they
    are not both ``rls`` with the same settings (the first setting that differs named)."""
    for predictor in (first, second):
        if type(predictor) is not RlsPredictor:
            raise MergeError(f"only rls predictors merge, got {type(predictor).__name__}")
    params_a, params_b = first.params(), second.params()
    for name in sorted(set(params_a) | set(params_b)):
        if params_a.get(name) != params_b.get(name):
            raise MergeError(f"predictors with different {name}: {params_a.get(name)!r} and {params_b.get(name)!r}")
    out = copy.deepcopy(first)
    for key, model in second._models.items():
        mine = first._models.get(key)
        out._models[key] = merge_discounted(mine, model) if mine is not None else copy.deepcopy(model)
    for key, detector in second._detectors.items():
        out._detectors.setdefault(key, copy.deepcopy(detector))
    for key, scale in second._scale.items():
        seen_a, seen_b = first._seen.get(key, 0), second._seen.get(key, 0)
        mine = first._scale.get(key)
        out._scale[key] = scale if mine is None else (seen_a * mine + seen_b * scale) / ((seen_a + seen_b) or 1)
        out._seen[key] = seen_a + seen_b
    solo, other = out._solo, second._solo
    solo._profiled.update(other._profiled)  # the latest given solo latency: the second's stream comes after
    for key, (mean, n) in other._alone.items():
        mine, m = solo._alone.get(key, (0.0, 0))
        solo._alone[key] = ((m * mine + n * mean) / (m + n), m + n)
    for key, value in other._lowest.items():
        solo._lowest[key] = min(value, solo._lowest.get(key, value))
    solo._total += other._total
    solo._count += other._count
    widened = [p._range_seen for p in (first, second) if p._slowdown_range != (MIN_SLOWDOWN, MAX_SLOWDOWN)]
    if widened:
        low, high = min(r[0] for r in widened), max(r[1] for r in widened)
        out._range_seen = (low, high)
        out._slowdown_range = (max(low / 2, MIN_SLOWDOWN), min(high * 2, MAX_SLOWDOWN))
    out.n_learned = first.n_learned + second.n_learned
    out.n_drifts = first.n_drifts + second.n_drifts
    out.n_clipped = first.n_clipped + second.n_clipped
    return out


def merge_fillings(first: Any, second: Any) -> Any:
    """The signal views' union per device and kind (the first's where both hold one) and the overlap
    statistics added (exactly the statistics of both streams)."""
    out = first.copy()
    for table in ("_devices", "_kinds"):
        mine = getattr(out.signals, table)
        for key, view in getattr(second.signals, table).items():
            mine.setdefault(key, dict(view))
    sums = out.overlaps._sums
    for key, (n, total) in second.overlaps._sums.items():
        entry = sums.setdefault(key, [0.0, 0.0])
        entry[0] += n
        entry[1] += total
    return out


def merge_dedup(first: Deduplicator, second: Deduplicator) -> Deduplicator:
    """The records taken in by either: per producer the highest sequence of both and the holes neither
    took; record ids of both."""
    out = copy.deepcopy(first)
    for name, window in second._producers.items():
        mine = out._producers.get(name)
        out._producers[name] = copy.deepcopy(window) if mine is None else _merge_window(mine, window)
    for record_id in second._ids:
        out._ids.setdefault(record_id, None)
    out.n_duplicates += second.n_duplicates
    out.n_too_old += second.n_too_old
    return out


def _merge_window(a: ProducerWindow, b: ProducerWindow) -> ProducerWindow:
    out = ProducerWindow(max(a.highest, b.highest), max(a.floor, b.floor))

    def missing(w: ProducerWindow, s: int) -> bool:
        return s > w.highest or s in w.holes

    out.holes = {s for s in a.holes | b.holes if out.floor < s <= out.highest and missing(a, s) and missing(b, s)}
    return out
