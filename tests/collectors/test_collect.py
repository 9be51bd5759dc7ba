"""A short real collection: worker processes running real models, real co-location, valid records."""

from __future__ import annotations

import gzip
import json
import statistics

import pytest

from collectors.schedule import parse_schedule
from collectors.summary import summarize
from collectors.workload import CollectionConfig, run_collection
from predictor.cli import main
from predictor.records.record import Record, parse_record
from predictor.records.rules import BATCH_CPU_SIGNAL

pytest.importorskip("torch")


def test_collect_command_writes_real_co_location_records(tmp_path, capsys) -> None:
    out = tmp_path / "run.jsonl.gz"
    status = main(
        [
            "collect",
            "--duration", "8.5",
            # ends with a light, mostly solo phase, long enough to drain the backlog on a loaded machine
            "--schedule", "0:resnet,mlp@200;2:bert,mlp@200;4:mlp@10",
            "--workers", "2",
            "--max-batch", "2",
            "--profile-repeats", "3",
            "--device", "cpu",
            "--quiet",
            "-o", str(out),
        ]
    )  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    assert "records written" in printed and "slowdown" in printed
    with gzip.open(out, "rt") as f:
        records = [parse_record(json.loads(line)) for line in f]  # every line is valid coloc/v1
    assert len(records) > 50
    assert {r.device for r in records} == {"cpu0"} and {r.source for r in records} == {"cpu"}
    assert all(r.solo_latency_ms and r.latency_ms for r in records), "latencies"
    assert all("gflops" in r.batch.attrs and "mbytes" in r.batch.attrs for r in records), "attrs"
    t0 = min(r.start_s for r in records)
    unsampled = [
        (r.start_s - t0, r.latency_ms, dict(r.signals)) for r in records if "cpu_util" not in r.signals
    ]
    assert not unsampled, unsampled[:3]
    # each batch's own CPU time: positive, and not more than its wall-clock latency (one thread). One
    # fresh-clone CI run of 2026-11-24 found a batch over it (one failure in ~40 runs of this test since,
    # cause unconfirmed: the worker now holds the garbage collector off between its reads); a CPU time
    # taken from another thread or the whole process would put many over it
    cpu = [(r.signals[BATCH_CPU_SIGNAL], r.latency_ms) for r in records]
    assert all(c > 0.0 for c, _ in cpu), [x for x in cpu if not x[0] > 0][:3]
    over = [(c, latency, r.batch.model) for (c, latency), r in zip(cpu, records, strict=True)
            if c > latency * 1.02 + 0.05]
    assert len(over) <= max(1, len(records) // 200), over[:5]
    # a batch that ran alone was on a core for a good part of its latency: its own thread's time is
    # measured, not another's (an idle thread's would be near 0). Not more than that: on a machine
    # loaded by other jobs a lone batch's thread gets half a core or less (0.496 seen at load ~5).
    alone = [r.signals[BATCH_CPU_SIGNAL] / r.latency_ms for r in records if not r.co_runners]
    assert statistics.median(alone) > 0.2

    meta = json.loads((tmp_path / "run.meta.json").read_text())
    assert meta["records"] == len(records) and meta["options"]["workers"] == 2
    conditions = meta["conditions"]
    assert len(conditions["loadavg_before"]) == 3 and conditions["cpu_count"] >= 1
    # two workers ran models for seconds (their share of the cores depends on what else runs)
    assert conditions["own_cores"] > 0.05 and conditions["busy_cores"] >= conditions["own_cores"] - 0.2
    assert "by other processes" in printed

    co_located = [r for r in records if r.co_runners]
    assert co_located and any(not r.co_runners for r in records)
    assert all(0.0 < c.overlap <= 1.0 for r in co_located for c in r.co_runners), "overlaps"
    # Slowdowns relative to the batches that ran alone in this same run: the solo profile is taken
    # at the start, and on a machine shared with other work the background load drifts after it;
    # the batches that ran alone tell by how much (1.0 on a quiet machine).
    background = statistics.median(r.slowdown for r in records if not r.co_runners)
    slowdowns = [r.slowdown / background for r in co_located]
    print(
        "co-located slowdown: median",
        statistics.median(slowdowns),
        "max",
        max(slowdowns),
        "background",
        background,
    )
    assert sum(s > 1.0 for s in slowdowns) >= 0.3 * len(slowdowns)  # co-location slows batches down...
    assert max(slowdowns) > 1.2  # ...some visibly

    # the schedule switched resnet out for bert, then bert out (starts lag arrivals under load: medians)
    switch = min(r.start_s for r in records) + 2.0
    resnet = statistics.median(r.start_s for r in records if r.batch.model == "resnet")
    bert = statistics.median(r.start_s for r in records if r.batch.model == "bert")
    assert resnet < switch < bert < switch + 2.0


def test_run_collection_streams_records_to_any_callable() -> None:
    received: list[Record] = []
    config = CollectionConfig(
        duration_s=2.0,
        phases=parse_schedule("0:vgg,mobilenet@150"),
        workers=2,
        max_batch=2,
        profile_repeats=3,
        device="cpu",
    )
    stages: list[str] = []
    result = run_collection(config, received.append, lambda status: stages.append(status.stage))
    assert result.records == len(received) > 10
    assert stages[0] == "starting" and "profiling" in stages and stages[-1] == "done"
    assert set(result.profile) == {(m, b) for m in ("vgg", "mobilenet") for b in (1, 2)}
    assert all(figures["solo_ms"] > 0 for figures in result.profile.values())
    assert result.tracker_stats["unknown_ends"] == 0
    (cpu,) = result.samplers  # no GPU: the CPU sampler alone
    assert cpu.name == "cpu-sampler" and cpu.reads > 50 and cpu.skipped_ticks >= 0 and cpu.cpu_s > 0
    assert {r.batch.model for r in received} == {"vgg", "mobilenet"}
    assert summarize(received).records == len(received)
