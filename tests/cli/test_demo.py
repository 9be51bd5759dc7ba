"""``predictor demo --short``: the service, the real CPU workload and the sample scheduler, end to end."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys

import pytest

from predictor.cli.demo import Conditions, Decision, DemoOptions, SchedulerStats, summary_lines, targets
from predictor.cli.demo_report import _decisions_csv, read_decisions, threshold_rows, threshold_table
from predictor.records.logio import write_records
from predictor.service.synthetic import synthetic_records

needs_workload = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("collectors.workload") is None,
    reason="the CPU workload needs torch and collectors.workload",
)


@needs_workload
def test_short_demo_runs_end_to_end_and_writes_its_report(tmp_path):
    log = tmp_path / "warm.jsonl"
    write_records(log, synthetic_records(200, seed=4))
    report = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "predictor.cli", "demo", "--short", "--duration", "3", "--warmup", "1",
         "--no-live", "--warm-start", str(log), "--neighbour", "0.3", "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "this machine:" in out and "200 records read" in out and "service stopped" in out
    summary = out[out.index("demo summary:"):out.index("service stopped")].strip().splitlines()
    assert len(summary) <= 12, summary
    assert "neighbour asked 0.3, used" in summary[0]
    decided = re.search(r"decided (\d+) batches after a 1 s warm-up \((\d+) dispatched unscored\): (\d+) dispatched, "
                        r"(\d+) refused \((\d+) of them run anyway", out)
    assert decided, out
    total, warm, dispatched, refused, explored = map(int, decided.groups())
    assert total == dispatched + refused and explored <= refused and total + warm > 20
    assert re.search(r"admission-time MAPE \(dispatched\) +[0-9.]+% \(after: [0-9.]+%\)", out), out
    for name in ("admission-time MAPE", "bound held", "deadlines met", "admitted (P(meet) >= 0.5)", "would have met"):
        assert re.search(rf"^  (ok    |MISSED|-     ) .*{re.escape(name)}", out, re.M), name
    assert "report: " + str(report / "report.md") in out
    page = (report / "report.md").read_text()
    for png in ("prediction_vs_actual.png", "coverage_admission.png", "error_by_co_runners.png"):
        assert (report / png).stat().st_size > 1000 and png in page
    assert (report / "decisions.csv").read_text().count("\n") == total + warm + 1


def test_the_summary_marks_each_missed_target_with_its_reason():
    stats = SchedulerStats(decisions=200, dispatched=150, deferred=40, explored=10, executed=150,
                           executed_explored=10, explored_met=9, dispatched_met=140, covered=135,
                           abs_pct_error=150 * 20.0, warmup_decisions=50)
    quiet = Conditions("AMD EPYC", 2, 0.1, other_cores=0.05)
    lines = summary_lines(DemoOptions(), stats, quiet, None, None, "/tmp/r/report.md")
    assert len(lines) <= 12
    text = "\n".join(lines)
    assert "MISSED admission-time MAPE" in text and "20.0%" in text and "(target <= 12%, or <= 1.2x" in text
    assert "MISSED 0.95 bound held" in text and "90.0%" in text  # 135 / 150 below 94%
    assert "MISSED deadlines met" in text and "140/150" in text  # 93.3% below 95%
    assert "MISSED admitted (P(meet) >= 0.5)" in text and "75.0%" in text
    assert "-      refused that would have met" in text  # no target on a quiet machine
    assert "report: /tmp/r/report.md" in text
    # Where the learner's error on the same batches once they ran is above the target, 1.2x that error holds
    for after, met in ((10.0, False), (16.0, False), (17.0, True)):
        stats.observation_mape = after
        mape = targets(DemoOptions(), stats, quiet)[0]
        assert mape.met is met and f"(after: {after:.1f}%)" in mape.text, (after, mape)
    # With a neighbour: admission and MAPE have no target; at most 1 in 4 refused may have met.
    busy = Conditions("AMD EPYC", 2, 0.1, other_cores=0.05, neighbour_asked=0.5, neighbour_used=0.49)
    by_name = {t.name: t for t in targets(DemoOptions(neighbour=0.5), stats, busy)}
    assert by_name["refused that would have met (explored)"].met is False
    assert "neighbour 0.5" in by_name["0.95 bound held (dispatched)"].why
    assert by_name["admitted (P(meet) >= 0.5)"].met is None
    assert by_name["0.95 bound held (dispatched)"].high is None


def test_a_summary_with_nothing_measured_marks_nothing():
    lines = summary_lines(DemoOptions(), SchedulerStats(), Conditions("cpu", 1, math.nan), None, None, None)
    assert not any("MISSED" in line or line.startswith("  ok") for line in lines)


def test_threshold_rows_read_what_other_thresholds_would_have_decided(tmp_path):
    def decision(p, actual, warmup=False, feasible=True):
        return Decision("mlp", 1, 5.0, 9.0, 10.0, feasible, actual_ms=actual, probability=p, warmup=warmup)

    decisions = [decision(0.99, 4.0), decision(0.9, 11.0), decision(0.6, 8.0), decision(0.3, 12.0, feasible=False),
                 decision(0.2, math.nan, feasible=False),  # refused, never ran: left out
                 decision(0.1, 20.0, warmup=True)]  # warm-up: left out
    rows = threshold_rows(decisions, (0.5, 0.95))
    assert rows == [(0.5, 3, 2, 1, 0), (0.95, 1, 1, 3, 1)]
    assert "| 0.95 | 1 | 100.0% | 3 | 33.3% |" in threshold_table(decisions)
    _decisions_csv(tmp_path / "decisions.csv", decisions)
    assert threshold_rows(read_decisions(tmp_path / "decisions.csv"), (0.5, 0.95)) == rows
