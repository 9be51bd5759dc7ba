"""Replay and evaluation: protocols, metrics, the CLI's table, JSON and plots."""

from __future__ import annotations

import json

import numpy as np
import pytest

from predictor.cli import main
from predictor.predictors import DEFAULT, create
from predictor.prequential.evaluation import Scored, run_prequential, run_split, split_records, summarize
from predictor.records.importers.igniter import import_igniter
from predictor.records.logio import write_records
from predictor.records.record import BatchSpec, CoRunner, Record


def test_summary_metrics():
    scored = Scored([10.0, 9.0, 12.0, 20.0], [10.0, 10.0, 10.0, 10.0])
    summary = summarize(scored)
    assert summary["mape"] == pytest.approx((0 + 0.1 + 0.2 + 1.0) / 4)
    assert summary["under_rate"] == 0.25 and summary["n"] == 4
    assert summary["p50"] == pytest.approx(np.percentile([0, 0.1, 0.2, 1.0], 50))


def timed(i: int, latency: float) -> Record:
    return Record("d", BatchSpec("m", 1), latency, start_s=float(i), solo_latency_ms=1.0)


def test_split_keeps_time_order_and_shuffles_untimed():
    records = [timed(i, 1.0 + i) for i in range(8)]
    train, test = split_records(records, 0.75, seed=1)
    assert train == records[:6] and test == records[6:]
    untimed = [Record("d", BatchSpec("m", 1), 1.0 + i) for i in range(40)]
    train, _ = split_records(untimed, 0.75, seed=1)
    assert train != untimed[:30] and split_records(untimed, 0.75, seed=1)[0] == train


def test_prequential_predicts_before_learning():
    records = [timed(i, 2.0) for i in range(3)]
    scored = run_prequential(create("solo"), records)
    assert scored.predicted == [1.0, 1.0, 1.0]  # solo latency known: slowdown 1


def test_keep_learning_changes_only_online_predictors():
    records = [
        Record("d", BatchSpec("a", 1, {"l2": 0.1 * (i % 5)}), 1.0 + 0.1 * (i % 5) + (0.5 if i >= 300 else 0),
               start_s=float(i), solo_latency_ms=1.0, co_runners=(CoRunner("b", 1, {"l2": 0.2}),))
        for i in range(400)
    ]
    frozen = run_split(create("rls"), records, split=0.5)
    learning = run_split(create("rls"), records, split=0.5, keep_learning=True)
    assert summarize(learning)["mape"] < summarize(frozen)["mape"]
    static_a = run_split(create("static"), records, split=0.5)
    static_b = run_split(create("static"), records, split=0.5, keep_learning=True)
    assert static_a.predicted == static_b.predicted


def test_evaluate_cli_table_json_and_plots(tmp_path, igniter_config, capsys):
    log = tmp_path / "igniter.jsonl.gz"
    write_records(log, import_igniter(igniter_config))
    out = tmp_path / "out.json"
    code = main(["evaluate", str(log), "--json", str(out), "--plots", str(tmp_path / "plots")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "igniter" in printed and "MAPE" in printed
    results = json.loads(out.read_text())["datasets"]["igniter"]["predictors"]
    assert set(results) == {"solo", "static", "ewma", "sgd", "rls", DEFAULT}  # DEFAULT_PREDICTORS
    for summary in results.values():
        assert set(summary) == {"mape", "p50", "p90", "p95", "p99", "under_rate", "n"} and summary["n"] == 375
    # interference is real in this data: modelling it must beat ignoring it
    assert results["rls"]["mape"] < results["solo"]["mape"] / 2
    assert (tmp_path / "plots" / "igniter-error-cdf.png").stat().st_size > 1000
    assert (tmp_path / "plots" / "igniter-rolling-error.png").stat().st_size > 1000


def test_replay_cli_reports_throughput(tmp_path, capsys):
    log = tmp_path / "run.jsonl"
    write_records(log, [timed(i, 1.5) for i in range(50)])
    assert main(["replay", str(log), "--predictor", "rls", "--prequential", "--json", str(tmp_path / "r.json")]) == 0
    assert "records/s" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["n"] == 50


def test_evaluate_cli_names_the_bad_line(tmp_path, capsys):
    log = tmp_path / "bad.jsonl"
    log.write_text('{"schema": "coloc/v1"}\n')
    assert main(["evaluate", str(log)]) == 2
    assert "line 1: batch: is required" in capsys.readouterr().err
