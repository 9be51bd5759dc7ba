"""``predictor collect``: run the real co-located workload and log one ``coloc/v1`` record per batch.

Importing this module is cheap (no ``torch``): ``torch`` is imported only in the
worker processes that :func:`collectors.workload.run_collection` starts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from collectors.catalog import MODEL_NAMES
from collectors.conditions import ConditionsMonitor, RecordingConditions
from collectors.schedule import constant_schedule, parse_schedule, validate_phases
from collectors.summary import SlowdownSummary
from collectors.workload import CollectionConfig, CollectionStatus, run_collection
from predictor.cli.extras import missing_workload
from predictor.records.logio import RecordWriter
from predictor.records.record import Record

DEFAULT_MODELS = "resnet,vgg,mobilenet,bert,gpt2,mlp"

EPILOG = """\
load:
  Requests arrive as independent Poisson processes, one per model; --rate is the
  total over the active models, shared equally. Each model's requests queue and
  close into a batch at --max-batch requests or when the oldest has waited
  --batch-timeout-ms. Batches run on --workers processes (one thread each on a
  CPU), which is where they co-locate and slow each other down.

schedule (--schedule):
  START:MODELS@RATE;START:MODELS@RATE;...   START in seconds from the start of
  the load (the first phase at 0), MODELS a comma list or * for all of --models,
  RATE requests/s in total. Leave a part out to keep the previous phase's value.
    --schedule "0:resnet,bert@40;60:vgg,gpt2@80"   mix and rate change at 60 s
    --schedule "0:*@40;60:@120"                    rate change only
  or a JSON file: [{"at": 0, "models": ["resnet", "bert"], "rate": 40}, ...]

output:
  One coloc/v1 JSON line per executed batch (gzip when the name ends in .gz):
  latency_ms measured, solo_latency_ms profiled alone at start-up, co_runners
  with overlap fractions, signals averaged over the batch window, and per-model
  intensity attrs (gflops, mbytes, cpu_util, seq_len). On a CPU each record's
  signals include batch_cpu_ms, the CPU time the batch's own thread used
  (logged for analysis; never a feature, since it is known only after the run).
  Beside the log, NAME.meta.json records how it was made: the command, the
  configuration, and the machine's load before and during the run (load average,
  cores busy, and cores used by *other* processes: near 0 for a clean recording).

Examples:
  predictor collect --duration 60 --models resnet,bert --rate 20 -o short.jsonl.gz
  predictor collect --duration 120 --models resnet,vgg,mobilenet,bert,gpt2,mlp \\
      --rate 40 --workers 2 --max-batch 8 -o run.jsonl.gz
  predictor collect --duration 300 --schedule "0:*@40;120:@120" --max-load 0.2 -o phases.jsonl.gz
  predictor report run.jsonl.gz --target host:50051   # then stream it into a running service

needs torch: pip install 'interference-predictor[workload]'
"""


def register(subparsers: Any) -> None:
    """Add the ``collect`` sub-command."""
    parser = subparsers.add_parser(
        "collect",
        help="run a real co-located inference workload and log co-location records",
        description=textwrap.fill(
            "Run real PyTorch models on concurrent worker processes under Poisson load "
            "and write one coloc/v1 record per executed batch.", 78),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-o", "--output", required=True, help="log to write (.jsonl or .jsonl.gz)")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of load (default 120)")
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"comma list (default {DEFAULT_MODELS})")
    parser.add_argument("--rate", type=float, default=40.0, help="requests/s over all models (default 40)")
    parser.add_argument("--workers", type=int, default=2, help="concurrent worker processes (default 2)")
    parser.add_argument("--max-batch", type=int, default=8, help="largest batch (default 8)")
    parser.add_argument(
        "--batch-timeout-ms", type=float, default=20.0, help="close a batch after this wait (default 20)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the arrivals (default 0)")
    parser.add_argument("--schedule", help="phases changing mix or rate over time (see below)")
    parser.add_argument("--sample-hz", type=float, default=50.0, help="sampler frequency (default 50)")
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="where models run (default auto)"
    )
    parser.add_argument(
        "--profile-repeats", type=int, default=9, help="solo runs per model and batch size (default 9)"
    )
    parser.add_argument(
        "--max-load",
        type=float,
        help="refuse to start when the 1-minute load average is above this (e.g. 0.2 for a clean recording)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def metadata_path(output: str | Path) -> Path:
    """Where the metadata of log ``output`` goes: ``run.jsonl.gz`` -> ``run.meta.json``."""
    path = Path(output)
    name = path.name.removesuffix(".gz").removesuffix(".jsonl")
    return path.with_name(name + ".meta.json")


def write_metadata(
    output: str | Path,
    args: argparse.Namespace,
    records: int,
    device_kind: str,
    conditions: RecordingConditions,
) -> Path:
    """Write the recording's metadata beside ``output``; returns its path."""
    options = {k: v for k, v in vars(args).items() if k not in ("func", "command", "quiet")}
    meta = {
        "recorded_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["predictor", *sys.argv[1:]]),
        "options": options,
        "records": records,
        "device_kind": device_kind,
        "conditions": conditions.as_dict(),
        "clean": conditions.clean,
    }
    path = metadata_path(output)
    path.write_text(json.dumps(meta, indent=2) + "\n")
    return path


def build_config(args: argparse.Namespace) -> CollectionConfig:
    """The :class:`~collectors.workload.CollectionConfig` of parsed arguments."""
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    validate_phases(constant_schedule(models, args.rate), MODEL_NAMES)
    if args.schedule:
        phases = parse_schedule(
            args.schedule, default_models=models, default_rate=args.rate, known=MODEL_NAMES
        )
    else:
        phases = constant_schedule(models, args.rate)
    return CollectionConfig(
        duration_s=args.duration,
        phases=phases,
        workers=args.workers,
        max_batch=args.max_batch,
        batch_timeout_ms=args.batch_timeout_ms,
        seed=args.seed,
        sample_hz=args.sample_hz,
        device=args.device,
        profile_repeats=args.profile_repeats,
    )


def run(args: argparse.Namespace) -> int:
    """Run ``predictor collect``; returns the exit status (2 when torch, the ``workload`` extra, is missing)."""
    missing = missing_workload("collect")
    if missing:
        print(missing, file=sys.stderr)
        return 2
    config = build_config(args)
    console = Console(stderr=True)
    load_now = os.getloadavg()[0]
    if args.max_load is not None and load_now > args.max_load:
        console.print(
            f"[red]not starting: the 1-minute load average is {load_now:.2f}, above --max-load "
            f"{args.max_load:g}; other jobs would distort the measured interference[/red]"
        )
        return 1
    summary = SlowdownSummary()
    writer = RecordWriter(args.output, atomic=True)

    def sink(record: Record) -> None:
        writer.write(record)
        summary.add(record)

    progress = Progress(
        TextColumn("[bold]{task.description:<10}"),
        BarColumn(),
        TextColumn("{task.completed:>5.0f}/{task.total:.0f} s"),
        TextColumn("{task.fields[records]:>7} records  {task.fields[dropped]} dropped  {task.fields[phase]}"),
        TimeElapsedColumn(),
        console=console,
        disable=args.quiet,
    )
    task = progress.add_task("starting", total=config.duration_s, records=0, dropped=0, phase="")

    def notify(status: CollectionStatus) -> None:
        phase = ""
        if status.phase is not None:
            phase = f"{','.join(status.phase.models)} @ {status.phase.rate:g}/s"
        progress.update(
            task,
            description=status.stage,
            completed=status.elapsed_s,
            records=status.records,
            dropped=status.dropped_requests,
            phase=phase,
        )

    monitor = ConditionsMonitor().start()
    try:
        with progress:
            result = run_collection(config, sink, notify)
    finally:
        writer.close()
        conditions = monitor.stop()
    meta = write_metadata(args.output, args, writer.count, result.device_kind, conditions)
    out = Console()
    out.print(summary.table("slowdown (latency / solo latency) per model pair"))
    size = os.path.getsize(args.output)
    out.print(
        f"{writer.count} records written to {args.output} ({size / 1e6:.2f} MB) in {result.wall_s:.0f} s; "
        f"{result.batches} batches of {result.requests} requests, {result.dropped_requests} requests dropped; "
        f"device {result.device_kind}; samplers at {config.sample_hz:g} Hz: "
        + ", ".join(
            f"{s.name} {s.reads} reads ({s.skipped_ticks} ticks skipped, "
            f"{100 * s.cpu_s / max(config.duration_s, 1e-9):.2f}% of a core)"
            for s in result.samplers
        )
    )
    during = conditions.loadavg_during
    out.print(
        f"conditions ({meta}): load average {conditions.loadavg_before[0]:.2f} before, "
        f"{during['mean']:.2f} mean / {during['max']:.2f} max during; {conditions.busy_cores:.2f} cores busy, "
        f"{conditions.own_cores:.2f} by this run, {conditions.other_cores:.2f} by other processes"
        + ("" if conditions.clean else " [yellow](not a clean recording)[/yellow]")
    )
    return 0
