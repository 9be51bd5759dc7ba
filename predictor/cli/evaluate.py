"""``predictor evaluate``: compare predictors on one or more logs."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from predictor.cli.progress import progress_bar
from predictor.predictors import DEFAULT, create
from predictor.predictors.ensemble import EnsemblePredictor
from predictor.prequential import tree_blocks
from predictor.prequential.blocks import predict_rows, prequential_blocks, supports
from predictor.prequential.evaluation import (
    Scored,
    read_by,
    run_prequential,
    run_split,
    split_records,
    summarize,
)
from predictor.records.logio import read_records
from predictor.records.record import Record
from predictor.records.typed_decoding import ColocRow, record_of

if TYPE_CHECKING:
    from predictor.analysis.admission_replay import ReplayResult

DEFAULT_PREDICTORS = ";".join(dict.fromkeys(("solo", "static", "ewma", "sgd", "rls", DEFAULT)))
EVALUATE_EPILOG = """\
Examples:
  predictor evaluate predictor/data/cpu-default.jsonl.gz
  predictor evaluate run.jsonl.gz other.jsonl.gz --predictors solo,rls --prequential --plots plots/
  predictor evaluate run.jsonl.gz --admission --json results.json
"""


def dataset_stem(path: str | Path) -> str:
    """File name without extensions: ``runs/cpu.jsonl.gz`` -> ``cpu``."""
    return Path(path).name.split(".")[0]


def add_protocol_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the evaluation protocol options (``--split``/``--prequential``, seed, tolerance)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--split", type=float, default=0.75, help="train fraction (default 0.75)")
    group.add_argument("--prequential", action="store_true", help="predict each record, then learn it")
    parser.add_argument(
        "--keep-learning",
        action="store_true",
        help="split mode: online predictors also learn each scored record after predicting it",
    )
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed for logs without start_s")
    parser.add_argument("--tolerant", action="store_true", help="skip bad lines (counted) instead of failing")
    parser.add_argument(
        "--serial",
        action="store_true",
        help="prequential rls: everything on one thread (by default each compiled block is learned on a "
        "second thread while the next block's features are computed, and a .gz log is inflated on a third: "
        "the same results to the bit, faster where a second core is free)",
    )


def protocol_label(args: argparse.Namespace) -> str:
    """A one-line description of the protocol the arguments choose."""
    if args.prequential:
        return "prequential (predict, then learn, every record)"
    learning = "online predictors keep learning" if args.keep_learning else "no learning"
    return f"split {args.split:.0%} train / {1 - args.split:.0%} scored ({learning} on the scored part)"


def score(spec: str, records: list, args: argparse.Namespace, advance) -> Scored:
    """Score the predictor ``spec`` on ``records`` (records, or rows read like them:
    :func:`~predictor.records.logio.iter_rows`) under the protocol of ``args``.

    Where the blockwise replay applies (:func:`~predictor.prequential.blocks.supports`: rls or sgd at
    their defaults), the prequential mode, and the split mode's training part, are learned in compiled
    blocks: the same state within 1e-9 as learning record by record (a prediction changes no state);
    the scored part is predicted per block (:func:`~predictor.prequential.blocks.predict_rows`), or with
    ``keep_learning`` replayed prequentially after the training part. A ``tree`` or an ``ensemble`` learns
    by :func:`~predictor.prequential.tree_blocks.prequential_tree_blocks` (the same state within 1e-9)."""
    predictor = create(spec, seed=args.seed)
    blockwise = supports(predictor)
    by_expert = not blockwise and tree_blocks.supports(predictor)
    if args.prequential:
        if blockwise or by_expert:
            scored = (prequential_blocks(predictor, records, overlap=not args.serial) if blockwise  # type: ignore[arg-type]
                      else tree_blocks.prequential_tree_blocks(predictor, records, overlap=not args.serial))
            advance(len(records))
            return scored
        return run_prequential(predictor, read_by(predictor, records), progress=advance)
    if by_expert and not args.keep_learning:
        train, test = split_records(records, args.split, args.seed)
        predictor.learn_solo(train)  # type: ignore[arg-type]  (as run_split's fit)
        tree_blocks.prequential_tree_blocks(predictor, train, overlap=not args.serial)
        advance(len(records))
        if isinstance(predictor, EnsemblePredictor):  # each expert's rows at once (rls, sgd), then combined
            return Scored(predict_rows(predictor, test), [row.latency_ms for row in test])
        test_records = [as_record(row) for row in test]
        return Scored(predictor.predict_many(test_records), [r.latency_ms for r in test_records])  # type: ignore[misc]
    if blockwise:
        train, test = split_records(records, args.split, args.seed)
        predictor.learn_solo(train)  # type: ignore[arg-type]  (as run_split's fit)
        measured = [row.latency_ms for row in test]
        if args.keep_learning:  # each scored record predicted, then learned: the prequential replay of them all
            predicted = prequential_blocks(predictor, [*train, *test], overlap=not args.serial).predicted[len(train):]
        else:
            prequential_blocks(predictor, train, overlap=not args.serial)  # type: ignore[arg-type]
            predicted = predict_rows(predictor, test)
        advance(len(records))
        return Scored(predicted, measured)  # type: ignore[arg-type]
    return run_split(predictor, list(read_by(predictor, records)), split=args.split, seed=args.seed,
                     keep_learning=args.keep_learning, progress=advance)


def as_record(row: ColocRow | Record) -> Record:
    """``row`` as a record (a decoded row converted; a record as it is)."""
    return record_of(row) if isinstance(row, ColocRow) else row


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` sub-command."""
    parser = subparsers.add_parser(
        "evaluate", help="compare predictors on coloc/v1 logs",
        description=textwrap.fill(
            "Compare predictors on one or more coloc/v1 logs offline (no service): error per "
            "predictor, and with --admission the service's coverage at admission time.", 78),
        epilog=EVALUATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("logs", nargs="+", help="coloc/v1 logs (.jsonl or .jsonl.gz)")
    parser.add_argument(
        "--predictors", default=DEFAULT_PREDICTORS,
        help=f"comma-separated names or name:key=value,... specs (default {DEFAULT_PREDICTORS})",
    )
    add_protocol_arguments(parser)
    parser.add_argument(
        "--admission",
        action="store_true",
        help="also replay each log through the service, asking before each record the admission-time "
        "question (co-runners without overlaps, no signals), and report its coverage at 0.95 and 0.99 "
        "per co-runner count, and the service's coverage per query shape, model and count",
    )
    parser.add_argument("--json", dest="json_out", help="write results as JSON here")
    parser.add_argument("--plots", help="write PNG plots (error CDF, rolling error) into this folder")
    parser.set_defaults(func=run)


def split_predictor_list(text: str) -> list[str]:
    """Predictor specs from ``"a,b"``, ``"rls:forgetting=0.99,delta=10,sgd"`` or ``"a;b"``.

    >>> split_predictor_list("solo,rls:forgetting=0.99,delta=10,sgd")
    ['solo', 'rls:forgetting=0.99,delta=10', 'sgd']
    """
    if ";" in text:
        return [s.strip() for s in text.split(";") if s.strip()]
    specs: list[str] = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        if "=" in token and ":" not in token and specs:
            specs[-1] += "," + token  # another argument of the previous spec
        else:
            specs.append(token)
    return specs


def run(args: argparse.Namespace) -> int:
    """Entry of ``predictor evaluate``."""
    # imported here: ``predictor replay`` (which shares this module's scoring) never needs the service
    from predictor.analysis.admission_replay import replay
    from predictor.analysis.plots import error_cdf, rolling_error
    from predictor.service.config import ServiceConfig

    console = Console()
    specs = split_predictor_list(args.predictors)
    output: dict = {"protocol": protocol_label(args), "seed": args.seed, "datasets": {}}
    for log in args.logs:
        records, report = read_records(log, tolerant=args.tolerant, inflate_ahead=not args.serial)
        if report.skipped:
            console.print(f"[yellow]{log}: {report.summary()}[/]")
        stem = dataset_stem(log)
        results: dict[str, Scored] = {}
        with progress_bar(f"{stem}", total=len(records) * len(specs)) as advance:
            for spec in specs:
                results[spec] = score(spec, records, args, advance)
        summaries = {name: summarize(s) for name, s in results.items()}
        output["datasets"][stem] = {"n_records": len(records), "skipped": report.skipped,
                                    "predictors": summaries}
        console.print(results_table(stem, output["protocol"], summaries))
        if args.admission:
            output["datasets"][stem]["admission"] = {}
            for spec in specs:
                replayed = replay(records, stem, ServiceConfig(predictor=spec, snapshot_every_s=0,
                                                               observation_log=False, outlier_gate=False))
                output["datasets"][stem]["admission"][spec] = admission_summary(replayed)
                console.print(admission_table(stem, spec, replayed))
                console.print(shape_table(stem, spec, replayed))
        if args.plots:
            folder = Path(args.plots)
            folder.mkdir(parents=True, exist_ok=True)
            error_cdf(results, f"{stem}: relative error CDF", folder / f"{stem}-error-cdf.png")
            rolling_error(results, f"{stem}: rolling error", folder / f"{stem}-rolling-error.png")
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(output, indent=2, allow_nan=True) + "\n")
    return 0


def admission_summary(result: ReplayResult) -> dict:
    """The admission replay as JSON: per co-runner count, and the service's per-shape slices."""
    return {
        "answered": result.answered,
        "refused": result.refused,
        "slices": {label: {"n": s.n, "coverage_0.95": s.coverage(0.95), "coverage_0.99": s.coverage(0.99),
                           "width_0.95": s.width(0.95), "width_0.99": s.width(0.99), "mape": s.mape}
                   for label, s in result.rows()},
        "service": [dataclasses.asdict(a) for a in (result.status.admission if result.status else ())],
    }


def admission_table(stem: str, spec: str, result: ReplayResult) -> Table:
    """Coverage of the admission-time answers per co-runner count (asked before each record was learned)."""
    table = Table(title=f"{stem} — {spec}: admission-time answers (co-runners without overlaps, no signals)",
                  title_justify="left")
    for column in ("slice", "n", "cov@0.95", "cov@0.99", "width@0.95", "width@0.99", "MAPE"):
        table.add_column(column, justify="right" if column != "slice" else "left")
    for label, s in result.rows():
        table.add_row(label, str(s.n), f"{s.coverage(0.95):.4f}", f"{s.coverage(0.99):.4f}",
                      f"{s.width(0.95):.3f}", f"{s.width(0.99):.3f}", f"{s.mape:.1f}%")
    return table


def shape_table(stem: str, spec: str, result: ReplayResult) -> Table:
    """The service's own coverage at its tracked confidence per query shape, and per co-runner
    count, device kind and model within it (observation-time shapes beside admission-time ones)."""
    status = result.status
    confidence = status.coverage_confidence if status else math.nan
    table = Table(title=f"{stem} — {spec}: coverage @ {confidence:g} per query shape (service)",
                  title_justify="left")
    for column in ("source", "shape", "slice", "n", "coverage", "MAPE"):
        table.add_column(column, justify="right" if column in ("n", "coverage", "MAPE") else "left")
    for a in status.admission if status else ():
        where = ("all" if a.co_runners == -1 and not a.model and not a.device_kind
                 else f"{a.co_runners} co-runners" if a.co_runners != -1
                 else f"kind {a.device_kind}" if a.device_kind else f"model {a.model}")
        table.add_row(a.source, a.query_shape, where, str(a.observations),
                      "-" if a.coverage is None else f"{a.coverage:.4f}", "-" if a.mape is None else f"{a.mape:.1f}%")
    return table


def results_table(stem: str, protocol: str, summaries: dict[str, dict]) -> Table:
    """One row per predictor: MAPE, error percentiles, under-prediction rate; the best in green."""
    table = Table(title=f"{stem} — {protocol}", title_justify="left")
    table.add_column("predictor")
    for column in ("MAPE", "p50", "p90", "p95", "p99", "under", "n"):
        table.add_column(column, justify="right")
    best = min((s["mape"] for s in summaries.values() if not math.isnan(s["mape"])), default=None)
    for name, s in summaries.items():
        cells = [f"{100 * s[k]:.2f}%" for k in ("mape", "p50", "p90", "p95", "p99", "under_rate")]
        style = "bold green" if s["mape"] == best else None
        table.add_row(name, *cells, str(s["n"]), style=style)
    return table
