"""The blockwise replay (:mod:`predictor.prequential.blocks`) equals ``run_prequential`` within rounding."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from experiments.common import DEFAULT_DATASET as DEFAULT_LOG
from predictor.predictors import create
from predictor.prequential.blocks import fast_prequential, prequential_blocks, supports
from predictor.prequential.evaluation import run_prequential, run_split, summarize
from predictor.records.logio import read_records, write_records
from predictor.service.synthetic import fleet_records, synthetic_records


def _records():
    shipped, _ = read_records(DEFAULT_LOG)
    return list(itertools.islice(shipped, 600)) + list(synthetic_records(400, seed=3))


@pytest.mark.parametrize("spec", ["rls", "rls:features='fine'", "rls:forgetting=0.95,delta=10.0",
                                  "rls:non_negative=False", "rls:features='fine',non_negative=False",
                                  "rls:forgetting=0.95,delta=10.0,non_negative=False",
                                  "rls:features='coarse',log_target=False,non_negative=False"])
def test_blockwise_replay_equals_the_reference(spec):
    records = _records()
    fast, slow = create(spec), create(spec)
    assert supports(fast)
    got = prequential_blocks(fast, records, block=37)
    expected = run_prequential(slow, records)
    np.testing.assert_allclose(got.predicted, expected.predicted, rtol=1e-9)
    assert got.measured == expected.measured
    a, b = fast._models[""], slow._models[""]
    assert a.index.columns == b.index.columns and (a.n_updates, a.n_refused) == (b.n_updates, b.n_refused)
    np.testing.assert_allclose(a._weights, b._weights, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(a.predicting_weights(), b.predicting_weights(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast._scale[""], slow._scale[""], rtol=1e-9)
    assert (fast._seen, fast.n_learned, fast._slowdown_range) == (slow._seen, slow.n_learned, slow._slowdown_range)


def _sgd_state(predictor) -> tuple:
    model = predictor._model
    return (dict(model.weights), dict(model.abs_max), model.intercept, model.n_iterations, predictor.n_learned,
            predictor._slowdown_range)


@pytest.mark.parametrize("spec", ["sgd", "sgd:log_target=False", "sgd:non_negative=False,learning_rate=0.05"])
def test_blockwise_sgd_replay_equals_the_reference(tmp_path, spec):
    """``sgd`` learned in compiled blocks (:mod:`predictor.predictors.sgd_kernel`): river's pipeline's state (the model's) to the
    bit, the predictions within NumPy's ``exp`` against ``math.exp``; from decoded rows and on the kernel
    thread, the same bits."""
    from predictor.records.logio import iter_rows

    records = _records()
    path = tmp_path / "log.jsonl.gz"
    write_records(path, records)
    fast, slow, on_rows, overlapped = (create(spec) for _ in range(4))
    assert supports(fast)
    got = prequential_blocks(fast, records, block=37)
    expected = run_prequential(slow, records)
    np.testing.assert_allclose(got.predicted, expected.predicted, rtol=1e-12)
    assert got.measured == expected.measured
    assert _sgd_state(fast) == _sgd_state(slow)
    for predictor, source, overlap in ((on_rows, iter_rows(path), False), (overlapped, records, True)):
        again = prequential_blocks(predictor, source, block=37, overlap=overlap)
        assert again.predicted == got.predicted and _sgd_state(predictor) == _sgd_state(fast)


def test_fast_prequential_reads_a_log_and_falls_back_for_other_predictors(tmp_path):
    records = _records()[:300]
    path = tmp_path / "log.jsonl.gz"
    write_records(path, records)
    for spec in ("rls:non_negative=False", "rls", "rls:split_by='model'", "ewma", "sgd", "sgd:l2=0.01"):
        got = fast_prequential(path, spec)
        expected = run_prequential(create(spec), read_records(path)[0])
        np.testing.assert_allclose(got.predicted, expected.predicted, rtol=1e-9)
    assert len(fast_prequential(path, "rls", limit=10).predicted) == 10
    for spec in ("rls:clip=2.0", "sgd:l2=0.01"):
        with pytest.raises(ValueError, match="blockwise replay takes rls"):
            prequential_blocks(create(spec), records)


def test_replay_cli_compiled_default_gives_the_reference_summary(tmp_path):
    import json

    from predictor.cli import main

    path = tmp_path / "log.jsonl.gz"
    write_records(path, _records()[:300])
    summaries = []
    for extra in (["--reference"], [], ["--fast"], ["--serial"]):
        out = tmp_path / f"summary{len(summaries)}.json"
        assert main(["replay", str(path), "--prequential", "--json", str(out), *extra]) == 0
        summaries.append(json.loads(out.read_text())["summary"])
    assert summaries[0]["n"] == summaries[1]["n"] == summaries[2]["n"] == 300
    assert summaries[1]["mape"] == pytest.approx(summaries[0]["mape"], rel=1e-9)
    assert summaries[2] == summaries[1] == summaries[3]  # learned on a second thread or not: the same bits


def test_evaluate_prequential_gives_the_reference_summaries(tmp_path):
    """``predictor evaluate --prequential`` learns rls in compiled blocks: the record-by-record summary."""
    import json

    from predictor.cli import main
    from predictor.prequential.evaluation import summarize

    records = _records()[:300]
    path, out = tmp_path / "log.jsonl.gz", tmp_path / "out.json"
    write_records(path, records)
    specs = ("rls", "rls:features='fine'", "rls:split_by='model'", "sgd")
    assert main(["evaluate", str(path), "--predictors", ",".join(specs), "--prequential", "--json", str(out)]) == 0
    got = json.loads(out.read_text())["datasets"]["log"]["predictors"]
    for spec in specs:
        expected = summarize(run_prequential(create(spec), read_records(path)[0]))
        assert got[spec]["n"] == expected["n"] == 300
        assert got[spec]["mape"] == pytest.approx(expected["mape"], rel=1e-9)


@pytest.mark.parametrize("spec", ["rls", "rls:features='fine'"])
def test_rows_replay_as_their_records(tmp_path, spec):
    """The replay over decoded rows (``logio.iter_rows``, no record per line) learns what it learns over
    the records of the same lines: the same predictions and state, to the bit."""
    from predictor.records.logio import iter_rows
    from predictor.records.typed_decoding import ColocRow

    path = tmp_path / "log.jsonl.gz"
    write_records(path, _records())
    rows = list(iter_rows(path))
    assert all(isinstance(r, ColocRow) for r in rows)
    on_rows, on_records = create(spec), create(spec)
    got = prequential_blocks(on_rows, rows, block=37)
    expected = prequential_blocks(on_records, read_records(path)[0], block=37)
    assert got.predicted == expected.predicted and got.measured == expected.measured
    a, b = on_rows._models[""], on_records._models[""]
    np.testing.assert_array_equal(a._weights, b._weights)
    assert (a.n_updates, on_rows._scale, on_rows._slowdown_range) == (b.n_updates, on_records._scale,
                                                                      on_records._slowdown_range)


@pytest.mark.parametrize("spec", ["rls", "rls:features='fine'", "rls:non_negative=False"])
def test_learning_on_a_second_thread_gives_the_same_bits(spec):
    """``overlap=True`` learns each block on the kernel thread while the next is read: the same
    predictions, the same state, to the bit."""
    records = _records()
    serial, overlapped = create(spec), create(spec)
    knows_serial: list[bool] = []
    knows_overlapped: list[bool] = []
    expected = prequential_blocks(serial, records, block=37, knows=knows_serial)
    got = prequential_blocks(overlapped, records, block=37, knows=knows_overlapped, overlap=True)
    assert got.predicted == expected.predicted and got.measured == expected.measured
    assert knows_overlapped == knows_serial
    a, b = overlapped._models[""], serial._models[""]
    np.testing.assert_array_equal(a._weights, b._weights)
    np.testing.assert_array_equal(a._s, b._s)
    assert (a.n_updates, a.n_refused, overlapped._scale, overlapped._seen) == (b.n_updates, b.n_refused,
                                                                             serial._scale, serial._seen)


def test_a_bad_line_mid_stream_leaves_the_block_in_flight_learned_whole(tmp_path):
    """A replay stopped by a bad line learns what the serial one learns: every block started
    (the one on the kernel thread included, taken in before the error is raised), none of the
    records after it."""
    from predictor.records.logio import iter_rows
    from predictor.records.record import RecordError

    path = tmp_path / "log.jsonl"
    write_records(path, _records()[:300])
    lines = path.read_text().splitlines()
    # in blocks of 16 the records 108-123 are learned as one block, started by the 123rd and taken in
    # when the 139th would start the next: a bad 130th line stops the stream with that block in flight
    lines.insert(129, '{"schema": "coloc/v1", "device": "cpu0"}')
    path.write_text("\n".join(lines) + "\n")
    models = []
    for overlap in (False, True):
        predictor = create("rls")
        with pytest.raises(RecordError, match="line 130"):
            prequential_blocks(predictor, iter_rows(path), block=16, overlap=overlap)
        models.append(predictor)
    serial, overlapped = (m._models[""] for m in models)
    assert overlapped.n_updates == serial.n_updates > 0
    np.testing.assert_array_equal(overlapped._weights, serial._weights)
    np.testing.assert_array_equal(overlapped._s, serial._s)
    assert models[1]._scale == models[0]._scale and models[1]._seen == models[0]._seen


def test_plans_started_afresh_past_their_bound_give_the_same_bits(monkeypatch):
    """Past MAX_PLANS row layouts the replay starts its plans afresh (the rows pending on the old ones
    learned first): the same predictions and state, to the bit, as with every plan kept."""
    from predictor.prequential import blocks as fastreplay

    records = _records()
    kept, bounded = create("rls"), create("rls")
    expected = prequential_blocks(kept, records, block=37, overlap=True)
    monkeypatch.setattr(fastreplay, "MAX_PLANS", 3)
    got = prequential_blocks(bounded, records, block=37, overlap=True)
    assert got.predicted == expected.predicted
    a, b = bounded._models[""], kept._models[""]
    np.testing.assert_array_equal(a._weights, b._weights)
    np.testing.assert_array_equal(a._s, b._s)


@pytest.mark.parametrize("stream", ["log", "fleet"])
def test_plans_kept_from_call_to_call_give_the_bits_of_fresh_plans(stream, monkeypatch):
    """Records learned a few at a time (the service's parts), the row plans and the compiled run kept
    from call to call (:class:`~predictor.prequential.blocks.KeptPlans`, :meth:`PlannedRun.reopen
    <predictor.regressors.rls_kernel.PlannedRun.reopen>`): the same predictions and state, to the bit,
    as with plans and runs made afresh by every call, also where the model changes between calls (a
    reference step, a restore), which starts them afresh."""
    from predictor.prequential.blocks import KeptPlans
    from predictor.regressors import rls_kernel

    opened = []
    open_run = rls_kernel._Run.__init__

    def counted(run, model):
        opened.append(model)
        open_run(run, model)

    monkeypatch.setattr(rls_kernel._Run, "__init__", counted)
    records = _records() if stream == "log" else fleet_records(1200, models=40, device_kinds=4, seed=5)
    kept, fresh = create("rls"), create("rls")
    plans = KeptPlans()
    for number, at in enumerate(range(0, len(records), 16)):
        part = records[at:at + 16]
        if number % 7 == 3:  # a step between calls: the reference's, growing the model where it grows
            assert kept.predict_learn_one(part[0]) == fresh.predict_learn_one(part[0])
            part = part[1:]
        points = (kept.restore_point(), fresh.restore_point()) if number % 11 == 5 else None
        got = prequential_blocks(kept, part, block=len(part), kept=plans)
        expected = prequential_blocks(fresh, part, block=len(part))
        assert got.predicted == expected.predicted
        if points is not None:  # learned, then undone: the kept plans must not outlive it
            kept.restore(points[0])
            fresh.restore(points[1])
    a, b = kept._models[""], fresh._models[""]
    assert a.index.columns == b.index.columns and a.index.dropped == b.index.dropped
    assert (a.n_updates, a.n_refused, kept._scale, kept._seen) == (b.n_updates, b.n_refused, fresh._scale, fresh._seen)
    np.testing.assert_array_equal(a._weights, b._weights)
    np.testing.assert_array_equal(a._s, b._s)
    np.testing.assert_array_equal(a._column_scale, b._column_scale)
    assert opened.count(a) < opened.count(b) / 2  # the kept run taken up by most calls


@pytest.mark.parametrize("stream", ["log", "fleet"])
def test_an_sgd_run_kept_from_call_to_call_gives_the_bits_of_fresh_runs(stream, monkeypatch):
    """``sgd`` learned a few records at a time with its run kept (:meth:`KeptPlans.sgd_rows
    <predictor.prequential.blocks.KeptPlans.sgd_rows>`): the same predictions and model, to the bit, as a
    fresh run per call; the kept run is taken up by every call but those after a change of the model
    from outside (a reference step, a restore), which read the model afresh."""
    from predictor.predictors.sgd_kernel import SgdRun
    from predictor.prequential.blocks import KeptPlans

    opened = []
    open_run = SgdRun.__init__

    def counted(run, predictor):
        opened.append(predictor)
        open_run(run, predictor)

    monkeypatch.setattr(SgdRun, "__init__", counted)
    records = _records() if stream == "log" else fleet_records(1200, models=40, device_kinds=4, seed=5)
    kept, fresh = create("sgd"), create("sgd")
    plans = KeptPlans()
    disrupted = 0  # calls after a change of the kept model from outside
    restored = False
    for number, at in enumerate(range(0, len(records), 16)):
        part = records[at:at + 16]
        stepped = number % 7 == 3
        if stepped:  # a step between calls: the reference's
            assert kept.predict_learn_one(part[0]) == fresh.predict_learn_one(part[0])
            part = part[1:]
        disrupted += number > 0 and (stepped or restored)
        points = (kept.restore_point(), fresh.restore_point()) if number % 11 == 5 else None
        got = prequential_blocks(kept, part, block=len(part), kept=plans)
        expected = prequential_blocks(fresh, part, block=len(part))
        assert got.predicted == expected.predicted
        restored = points is not None
        if restored:  # learned, then undone: the kept run must not outlive it
            kept.restore(points[0])
            fresh.restore(points[1])
    a, b = kept._model, fresh._model
    assert list(a.weights.items()) == list(b.weights.items())
    assert list(a.abs_max.items()) == list(b.abs_max.items())
    assert (a.intercept, a.n_iterations) == (b.intercept, b.n_iterations)
    assert opened.count(kept) == 1 + disrupted < number


@pytest.mark.parametrize("spec", ["rls", "rls:features='fine'"])
def test_a_fleet_past_the_feature_cap_replays_blockwise_as_the_reference(spec):
    """Many models (a column per model and per pair of models, past the feature index's cap): the names
    the full index has no room for are dropped in a block as by the reference, and counted alike; the
    rows are learned in blocks (the reference takes only the rows that grow the model)."""
    records = fleet_records(1500, models=40, device_kinds=4, seed=5)
    fast, slow = create(spec), create(spec)
    taken = []
    reference_step = fast.predict_learn_one

    def counted(record):
        taken.append(record)
        return reference_step(record)

    fast.predict_learn_one = counted
    got = prequential_blocks(fast, records, block=64)
    expected = run_prequential(slow, records)
    np.testing.assert_allclose(got.predicted, expected.predicted, rtol=1e-9)
    a, b = fast._models[""], slow._models[""]
    assert a.index.dropped == b.index.dropped > 0
    assert a.index.columns == b.index.columns and a.n_updates == b.n_updates
    np.testing.assert_allclose(a._weights, b._weights, rtol=1e-9, atol=1e-9)
    assert len(taken) < a._weights.size  # at most one reference step per column grown


def test_split_replay_learns_its_training_part_in_blocks_as_run_split(tmp_path):
    import json

    from predictor.cli import main

    path = tmp_path / "log.jsonl.gz"
    records = _records()[:400]
    write_records(path, records)
    out = tmp_path / "split.json"
    assert main(["replay", str(path), "--predictor", "rls", "--json", str(out)]) == 0
    got = json.loads(out.read_text())["summary"]
    expected = summarize(run_split(create("rls"), records))
    assert got["n"] == expected["n"] == 100
    assert got["mape"] == pytest.approx(expected["mape"], rel=1e-9)
