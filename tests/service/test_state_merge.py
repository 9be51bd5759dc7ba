"""Merge as a feature: two shards' saved states into one (``predictor state merge A B -o C``).

Shards learn disjoint device kinds; the merged state is compared with a service that learned both
streams, the first's then the second's (``docs/design.md``, Merging shards): the model exactly with
``forgetting=1`` (the unconstrained weights, within inversion rounding), within the measured bound
with the default forgetting; each kind's conformal calibration is its shard's, exactly. Incompatible
states are refused naming what differs, and nothing is written.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from one_truth_data import chunked, records

from predictor.predictors import create
from predictor.regressors.merge import merge_discounted
from predictor.service import Service, ServiceConfig

ROOT = Path(__file__).resolve().parents[2]
RECORDS = records(1200, outliers=(), profiled=False)  # solo latencies given: the targets do not depend on history
FIRST = [r for r in RECORDS if r.device_kind == "A10"]
SECOND = [r for r in RECORDS if r.device_kind == "L4"]


def _unconstrained(predictor, rows) -> np.ndarray:
    twin = copy.deepcopy(predictor)
    for model in twin._models.values():
        model.non_negative_contention = False
        model._projected = None
    return np.array(twin.predict_many(rows))


def _learned(spec: str, rows):
    predictor = create(spec)
    for row in rows:
        predictor.learn_one(row)
    return predictor


@pytest.mark.parametrize(("spec", "bound"), [("rls:forgetting=1.0", 1e-8), ("rls", 0.05)])
def test_merged_model_is_the_model_of_both_streams_in_turn(spec, bound):
    """``forgetting=1``: exact. The default 0.998: the first's evidence discounted by the second's
    updates, an approximation (the trace bound rescales the covariance), measured within 5%."""
    a, b, union = _learned(spec, FIRST), _learned(spec, SECOND), _learned(spec, FIRST + SECOND)
    merged = merge_discounted(a._models[""], b._models[""])
    both = copy.deepcopy(union)
    both._models[""] = merged
    rows = RECORDS[-300:]
    expected, got = _unconstrained(union, rows), _unconstrained(both, rows)
    assert np.max(np.abs(got - expected) / np.abs(expected)) < bound


def test_merge_refuses_models_of_other_settings():
    a, b = _learned("rls", FIRST[:50]), _learned("rls:forgetting=0.99", SECOND[:50])
    with pytest.raises(ValueError, match="forgetting"):
        merge_discounted(a._models[""], b._models[""])


def _shard(folder: Path, rows, spec: str = "rls") -> Path:
    service = Service(ServiceConfig(predictor=spec, snapshot_every_s=0))
    service.open(folder)
    service.report_observations(chunked(rows, [100]))
    service.close()  # a final snapshot covering everything learned
    return folder


def _merge_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "predictor.cli", "state", "merge", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_state_merge_cli_writes_a_state_a_server_answers_from(tmp_path):
    spec = "rls:forgetting=1.0"
    a, b = _shard(tmp_path / "a", FIRST, spec), _shard(tmp_path / "b", SECOND, spec)
    done = _merge_cli(str(a), str(b), "-o", str(tmp_path / "merged"))
    assert done.returncode == 0, done.stderr
    assert f"{len(RECORDS)} observations" in done.stdout
    merged = Service(ServiceConfig(predictor=spec, snapshot_every_s=0))
    said = merged.open(tmp_path / "merged")
    assert f"restored {len(RECORDS)} observations" in said
    shards = []
    for folder in (a, b):
        shard = Service(ServiceConfig(predictor=spec, snapshot_every_s=0))
        shard.open(folder)
        shards.append(shard)
    # each kind's conformal calibration is its shard's, exactly
    for shard, kind in zip(shards, ("A10", "L4"), strict=True):
        for predicted in (1.0, 10.0):
            assert merged.state.calibrator.upper_bound(predicted, kind, 0.9) == shard.state.calibrator.upper_bound(
                predicted, kind, 0.9)
    # the model: that of a service that learned both streams in turn (its unconstrained weights)
    union = Service(ServiceConfig(predictor=spec, snapshot_every_s=0, observation_log=False))
    union.open()
    union.report_observations(chunked(FIRST + SECOND, [100]))
    rows = RECORDS[-200:]
    expected, got = _unconstrained(union.state.predictor, rows), _unconstrained(merged.state.predictor, rows)
    assert np.max(np.abs(got - expected) / np.abs(expected)) < 1e-8
    assert merged.state.sequence == len(RECORDS)
    # and it goes on learning
    merged.report_observations(chunked(RECORDS[:10], [10]))
    assert merged.state.predictor.n_learned == len(RECORDS) + 10
    merged.close()


@pytest.mark.parametrize(("spec_b", "named"), [("rls:forgetting=0.99", "forgetting"),
                                               ("rls:features=fine", "features"),
                                               ("sgd", "predictors")])
def test_incompatible_states_are_refused_naming_what_differs_and_nothing_is_written(tmp_path, spec_b, named):
    a, b = _shard(tmp_path / "a", FIRST[:60]), _shard(tmp_path / "b", SECOND[:60], spec_b)
    out = tmp_path / "out.snapshot"
    done = _merge_cli(str(a), str(b), "-o", str(out))
    assert done.returncode == 2
    assert named in done.stderr, done.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.snapshot.*"))
