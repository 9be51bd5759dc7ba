"""``predictor replay LOG --predictor NAME``: stream a log through one predictor."""

from __future__ import annotations

import argparse
import gc
import json
import textwrap
import time

from rich.console import Console

from predictor.cli.evaluate import add_protocol_arguments, protocol_label, results_table, score
from predictor.cli.progress import progress_bar
from predictor.predictors import DEFAULT, create
from predictor.prequential import tree_blocks
from predictor.prequential.evaluation import run_prequential, summarize
from predictor.records.logio import ReadReport, iter_records, iter_rows
from predictor.runtime.gc_tuning import DEFAULT_YOUNG_THRESHOLD, collector, paused

REPLAY_EPILOG = """\
Examples:
  predictor replay predictor/data/cpu-default.jsonl.gz                 # the default learner, 75% train / 25% scored
  predictor replay run.jsonl.gz --predictor rls:forgetting=0.99 --prequential
  predictor replay run.jsonl.gz --predictor sgd --prequential --tolerant --json sgd.json
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``replay`` sub-command."""
    parser = subparsers.add_parser(
        "replay", help="stream a coloc/v1 log through one predictor",
        description=textwrap.fill(
            "Stream a coloc/v1 log through one predictor offline (no service) and print its error.", 78),
        epilog=REPLAY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("log", help="coloc/v1 log (.jsonl or .jsonl.gz)")
    parser.add_argument("--predictor", default=DEFAULT, help=f"name or name:key=value,... (default {DEFAULT})")
    add_protocol_arguments(parser)
    parser.add_argument("--reference", action="store_true",
                        help="with --prequential: learn record by record in Python, never in compiled blocks "
                        "(by default rls, split_by/clip/drift_reset unset, learns in compiled blocks: the same "
                        "results within 1e-9)")
    parser.add_argument("--fast", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for scripts
    parser.add_argument("--json", dest="json_out", help="write the summary as JSON here")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry of ``predictor replay``."""
    started = time.perf_counter()
    report = ReadReport()
    # the collector as a serving process runs it (predictor.runtime.gc_tuning): young objects collected
    # less often, and the split's rows, alive to the end, frozen once read (never traversed again)
    with collector(DEFAULT_YOUNG_THRESHOLD):
        if args.prequential:  # a stream: never held in memory
            if args.reference:
                records = iter_records(args.log, tolerant=args.tolerant, report=report, inflate_ahead=not args.serial)
                scored = run_prequential(create(args.predictor, seed=args.seed), records)
            else:
                scored = tree_blocks.replay_log(args.log, args.predictor, seed=args.seed, tolerant=args.tolerant,
                                                report=report, overlap=not args.serial)
            loaded = started
        else:
            # rows read like records (the replay's fast reader); a record is built only where one is needed
            with paused():  # rows hold no reference cycles: nothing for a collection to find in them
                records = list(iter_rows(args.log, tolerant=args.tolerant, report=report,
                                         inflate_ahead=not args.serial))
                gc.freeze()  # before the collector resumes: it would first traverse every row once
            loaded = time.perf_counter()
            with progress_bar(args.predictor, total=len(records)) as advance:
                scored = score(args.predictor, records, args, advance)
    finished = time.perf_counter()
    count = report.accepted
    summary = summarize(scored)
    console = Console()
    if report.skipped:
        console.print(f"[yellow]{report.summary()}[/]")
    console.print(results_table(args.log, protocol_label(args), {args.predictor: summary}))
    rate = count / max(finished - started, 1e-9)
    phases = "read, predicted and learned as a stream" if args.prequential else (
        f"read {loaded - started:.2f} s, predicted and learned {finished - loaded:.2f} s")
    console.print(f"{count} records in {finished - started:.2f} s ({phases}): {rate:,.0f} records/s end to end")
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as stream:
            json.dump({"log": args.log, "predictor": args.predictor, "protocol": protocol_label(args),
                       "summary": summary, "records_per_s": rate, "skipped": report.skipped}, stream, indent=2)
    return 0
