"""Study: how far is a merged state from the state of a learner that saw both shards' streams?

Two shards learn the records of ``tests/one_truth_data.py`` of one device kind each (solo latencies
given, so that a record's target does not depend on what was learned before); their ``rls`` models
are merged (:func:`predictor.regressors.merge.merge_discounted`) and compared with a model that
learned the first shard's stream, then the second's: the largest relative difference of the
predictions on the last 300 records, with the contention weights unconstrained (the learned weights)
and projected (what answers use), and whether the trace bound was reached. Then whole service states
(:func:`predictor.service.state_merge.merge_states`): the largest relative difference of the answers
(latency / bound) from a service that learned both streams in turn.

Run: ``.venv/bin/python -m experiments.studies.merge_shards`` (a minute).
"""

from __future__ import annotations

import copy
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from one_truth_data import answers_of, chunked, max_relative, records  # noqa: E402

from predictor.predictors import create  # noqa: E402
from predictor.regressors.merge import merge_discounted  # noqa: E402
from predictor.service import Service, ServiceConfig  # noqa: E402
from predictor.service.state_merge import merge_states  # noqa: E402


def _learned(spec: str, rows):
    predictor = create(spec)
    for row in rows:
        predictor.learn_one(row)
    return predictor


def _predictions(predictor, rows, constrained: bool) -> np.ndarray:
    twin = copy.deepcopy(predictor)
    if not constrained:
        for model in twin._models.values():
            model.non_negative_contention = False
            model._projected = None
    return np.array(twin.predict_many(rows))


def models(spec: str, n: int) -> str:
    """The model comparison of one predictor spec over ``n`` records, as a line."""
    rows = records(n, outliers=(), profiled=False)
    first, second = ([r for r in rows if r.device_kind == k] for k in ("A10", "L4"))
    a, b, union = _learned(spec, first), _learned(spec, second), _learned(spec, first + second)
    merged = copy.deepcopy(union)
    merged._models[""] = merge_discounted(a._models[""], b._models[""])
    out = []
    for constrained in (False, True):
        x, y = (_predictions(p, rows[-300:], constrained) for p in (union, merged))
        out.append(float(np.max(np.abs(x - y) / np.abs(x))))
    model = union._models[""]
    reached = model._scale * model._trace_s >= model.trace_bound * (1 - 1e-9)
    return f"{spec:>22} {n:>5}  {out[0]:9.3g}  {out[1]:9.3g}  {'yes' if reached else 'no':>5}"


def services(spec: str, n: int) -> str:
    """The answers of a merged service state against a service that learned both streams, as a line."""
    rows = records(n, outliers=(), profiled=False)
    first, second = ([r for r in rows if r.device_kind == k] for k in ("A10", "L4"))
    config = ServiceConfig(predictor=spec, snapshot_every_s=0, observation_log=False)

    def fed(items) -> Service:
        service = Service(config)
        service.open()
        service.report_observations(chunked(items, [100]))
        return service

    a, b, union = fed(first), fed(second), fed(first + second)
    merged = Service(config)
    merged.open()
    state = merge_states(pickle.loads(a.state.state_payload()), pickle.loads(b.state.state_payload()))
    merged.state.predictor, merged.state.calibrator = state["predictor"], state["calibrator"]
    merged.state.admission, merged.state.filling = state["admission"], state["filling"]
    merged.state.generation += 1
    x, y = answers_of(union.predict), answers_of(merged.predict)
    latency = max_relative([v for i, v in enumerate(x) if i % 4 in (0, 2)], [v for i, v in enumerate(y) if i % 4 in (0, 2)])
    bound = max_relative([v for i, v in enumerate(x) if i % 4 in (1, 3)], [v for i, v in enumerate(y) if i % 4 in (1, 3)])
    return f"{spec:>22} {n:>5}  latency {latency:.3g}  bound {bound:.3g}"


def main() -> None:
    """Run the study (see the module)."""
    print("models: max relative difference of predictions, merged vs both streams in turn")
    print(f"{'predictor':>22} {'records':>5}  {'learned':>9}  {'projected':>9}  {'trace bound':>5}")
    for spec in ("rls:forgetting=1.0", "rls", "rls:forgetting=0.99"):
        for n in (600, 1200, 3000):
            print(models(spec, n))
    print("service states: max relative difference of the answers (32 queries, 0.9 and 0.99)")
    for spec in ("rls:forgetting=1.0", "rls"):
        print(services(spec, 1200))


if __name__ == "__main__":
    main()
