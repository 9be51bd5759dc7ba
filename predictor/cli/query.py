"""``predictor query``: ask a running service from the command line, answers as tables.

Examples (against ``predictor serve`` on the default port)::

    predictor query status
    predictor query predict --device cpu0 --model resnet --batch-size 4
    predictor query predict --device gpu0 --model vgg19 --batch-size 1 \\
        --attr l2_util=0.07 --co-runner vgg19:4:0.8 --solo-ms 5.5
    predictor query deadline --device cpu0 --model bert --batch-size 2 --deadline-ms 40
    predictor query rank --devices cpu0,cpu1 --model mlp --batch-size 8 --deadline-ms 30
    predictor query plan --stage resnet:8 --stage bert:4 --stage mlp:8 --edge 0:1 --edge 0:2 \\
        --devices cpu0,cpu1 --deadline-ms 120 [--prices 1.0,2.5]
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from rich.console import Console
from rich.table import Table

from predictor.records.record import BatchSpec
from predictor.service import Candidate, CoRunnerSource, PlannedCoRunner, Query, ServiceError
from predictor.service.pipeline_types import PipelineCost, PipelineStage
from predictor.service.types import InputPlace


def parse_key_values(items: list[str] | None, option: str) -> dict[str, float]:
    """``["a=1", "b=2.5"]`` to ``{"a": 1.0, "b": 2.5}``."""
    out: dict[str, float] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        try:
            if not sep or not key:
                raise ValueError
            out[key] = float(value)
        except ValueError:
            raise ValueError(f"{option}: expected KEY=NUMBER, got {item!r}") from None
    return out


def parse_co_runner(text: str) -> PlannedCoRunner:
    """``MODEL:BATCH[:OVERLAP]`` or ``MODEL:BATCH:+REMAINING_MS`` to a planned co-runner."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3) or not parts[0]:
            raise ValueError
        model, batch_size = parts[0], int(parts[1])
        if len(parts) == 2:
            return PlannedCoRunner(model, batch_size)
        if parts[2].startswith("+"):
            return PlannedCoRunner(model, batch_size, remaining_ms=float(parts[2][1:]))
        return PlannedCoRunner(model, batch_size, overlap=float(parts[2]))
    except ValueError:
        raise ValueError(
            f"--co-runner: expected MODEL:BATCH[:OVERLAP|:+REMAINING_MS], got {text!r}"
        ) from None


def register(subparsers: Any) -> None:
    """Add the ``query`` sub-command and its ``predict``, ``deadline``, ``rank``, ``plan`` and ``status``."""
    parser = subparsers.add_parser(
        "query",
        help="ask a running service: predict, deadline, rank, plan, status",
        description="Ask a running prediction service and print the answer.",
    )
    parser.add_argument("--target", default="localhost:50051", help="host:port (default localhost:50051)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call (default 10)")
    add_client_security_arguments(parser)
    what = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    predict = what.add_parser("predict", help="predicted latency and upper bound of a batch on a device")
    add_placement_arguments(predict)
    add_batch_arguments(predict)
    deadline = what.add_parser("deadline", help="whether a batch meets a deadline on a device")
    add_placement_arguments(deadline)
    add_batch_arguments(deadline)
    deadline.add_argument("--deadline-ms", type=float, required=True, help="deadline, ms from now")
    rank = what.add_parser("rank", help="rank candidate devices for a batch (live view of each)")
    rank.add_argument("--devices", required=True, help="comma list of devices")
    add_batch_arguments(rank)
    rank.add_argument("--deadline-ms", type=float, required=True, help="deadline, ms from now")
    pipeline = what.add_parser("plan", help="plan a pipeline: a device and a budget per stage for one deadline")
    pipeline.add_argument("--stage", action="append", required=True, metavar="MODEL:BATCH[:SOLO_MS]",
                          help="a stage (repeatable, in order)")
    pipeline.add_argument("--edge", action="append", metavar="FROM:TO",
                          help="stage FROM must end before stage TO starts (repeatable); none: a chain")
    pipeline.add_argument("--devices", required=True, help="comma list of candidate devices")
    pipeline.add_argument("--idle", action="store_true", help="the devices run nothing else (no live view)")
    pipeline.add_argument("--deadline-ms", type=float, required=True, help="end-to-end deadline, ms from now")
    pipeline.add_argument("--confidence", type=float, help="confidence of the bound (default: the service's)")
    pipeline.add_argument("--prices", help="comma list of prices per busy second, one per device: minimise price")
    what.add_parser("status", help="observations learned, rolling error, coverage, drift alarms")
    parser.set_defaults(func=run)


def add_client_security_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-server-name``, ``--auth-token-file``."""
    group = parser.add_argument_group("security")
    group.add_argument("--tls-ca", metavar="PEM", help="CA of the server's certificate: connect over TLS")
    group.add_argument("--tls-cert", metavar="PEM", help="client certificate for mutual TLS")
    group.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    group.add_argument(
        "--tls-server-name", metavar="NAME", help="name to check the server certificate against"
    )
    group.add_argument("--auth-token-file", metavar="FILE", help="file holding the bearer token to send")


def client_from_args(args: argparse.Namespace) -> Any:
    """An :class:`~predictor.rpc.client.InterferenceClient` for the target and security arguments."""
    from predictor.rpc.client import InterferenceClient  # heavy: grpc, not at CLI registration
    from predictor.rpc.security import channel_credentials, read_token  # heavy: grpc

    credentials = None
    if args.tls_ca or args.tls_cert:
        credentials = channel_credentials(args.tls_ca, args.tls_cert, args.tls_key)
    token = read_token(args.auth_token_file) if args.auth_token_file else None
    return InterferenceClient(
        args.target,
        timeout=args.timeout,
        credentials=credentials,
        token=token,
        server_name=args.tls_server_name,
    )


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options describing the batch (model, size, attributes, solo latency, confidence)."""
    parser.add_argument("--model", required=True, help="model of the batch")
    parser.add_argument("--batch-size", type=int, required=True, help="batch size")
    parser.add_argument("--attr", action="append", metavar="KEY=VALUE", help="batch attribute (repeatable)")
    parser.add_argument("--solo-ms", type=float, help="profiled solo latency of the batch")
    parser.add_argument("--confidence", type=float, help="confidence of the bound (default: the service's)")
    parser.add_argument("--input-host", default="", help="host where the batch's input is (topology)")
    parser.add_argument("--input-device", default="", help="device already holding the batch's input")
    parser.add_argument("--input-bytes", type=float, help="size of the input: the answer adds its transfer")


def _input(args: argparse.Namespace) -> InputPlace | None:
    if args.input_bytes is None and not args.input_host and not args.input_device:
        return None
    return InputPlace(args.input_host, args.input_device, args.input_bytes)


def add_placement_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options describing where the batch goes (device, kind, co-runners)."""
    parser.add_argument("--device", required=True, help="device to place the batch on")
    parser.add_argument("--device-kind", default="", help="device kind (default: what the service knows)")
    parser.add_argument(
        "--co-runner",
        action="append",
        metavar="MODEL:BATCH[:OVERLAP|:+REMAINING_MS]",
        help="explicit co-runner (repeatable); none: the service's live view of the device",
    )
    parser.add_argument("--idle", action="store_true", help="the device runs nothing else (no live view)")


def _query(args: argparse.Namespace) -> Query:
    runners = tuple(parse_co_runner(c) for c in args.co_runner or [])
    explicit = bool(runners) or args.idle
    return Query(
        device=args.device,
        batch=BatchSpec(args.model, args.batch_size, parse_key_values(args.attr, "--attr")),
        device_kind=args.device_kind,
        co_runners=runners,
        co_runner_source=CoRunnerSource.EXPLICIT if explicit else CoRunnerSource.AUTO,
        solo_latency_ms=args.solo_ms,
        input=_input(args),
    )


def _fmt(value: float, digits: int = 2) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def prediction_rows(prediction: Any) -> list[tuple[str, str]]:
    """``(label, value)`` rows describing a :class:`~predictor.service.types.Prediction`."""
    runners = (
        ", ".join(f"{c.model}×{c.batch_size} ({c.overlap:.2f})" for c in prediction.co_runners) or "none"
    )
    transfer = [("transfer", f"{_fmt(prediction.transfer_ms)} ms over the {prediction.transfer_link} link "
                             f"(bound {_fmt(prediction.transfer_bound_ms)} ms)")] if prediction.transfer_link else []
    return transfer + [
        ("predicted latency", f"{_fmt(prediction.latency_ms)} ms"),
        ("solo latency", f"{_fmt(prediction.solo_latency_ms)} ms"),
        ("slowdown", f"{_fmt(prediction.slowdown, 3)}×"),
        (f"upper bound @ {prediction.confidence:g}", f"{_fmt(prediction.upper_bound_ms)} ms"),
        ("bound from", f"{prediction.bound_source.value} ({prediction.residuals} residuals)"),
        ("co-runners (overlap)", runners),
        ("device kind", prediction.device_kind or "-"),
        ("predictor", f"{prediction.predictor} ({prediction.observations_learned} observations)"),
    ]


def _table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    return table


def status_table(status: Any) -> Table:
    """The service status as a table, one row per device kind."""
    table = Table(
        title=f"{status.predictor}: {status.observations_learned} observations learned, "
        f"{status.observations_rejected} rejected; ready={status.ready}",
    )
    for column in (
        "device kind",
        "observations",
        "rolling MAPE %",
        f"coverage @ {status.coverage_confidence:g}",
        "residuals",
        "drift alarms",
    ):
        table.add_column(column, justify="right" if column != "device kind" else "left")
    for kind in status.device_kinds:
        table.add_row(
            kind.device_kind or "(none)",
            str(kind.observations),
            _fmt(kind.rolling_mape),
            _fmt(kind.coverage, 4),
            str(kind.residuals),
            str(kind.drift_alarms),
        )
    table.add_row("[bold]all", "", _fmt(status.rolling_mape), _fmt(status.coverage, 4), "", "")
    table.caption = (
        f"{status.devices} devices, {status.batches_running} batches running, up {status.uptime_s:.0f} s; "
        f"refused: {status.observations_outliers} outliers, {status.observations_rate_limited} over rate"
    )
    if status.log is not None:
        log = status.log
        table.caption += (
            f"; log fsync {log.fsync}: #{log.last_sequence} appended, #{log.synced_sequence} synced, "
            f"#{log.snapshot_sequence} in the snapshot"
        )
    return table


def run(args: argparse.Namespace) -> int:
    """Entry of ``predictor query``."""
    import grpc  # heavy: not at CLI registration

    console = Console()
    with client_from_args(args) as client:
        try:
            if args.what == "status":
                console.print(status_table(client.status()))
            elif args.what == "predict":
                prediction = client.predict(_query(args), args.confidence)
                console.print(
                    _table(f"{args.model}×{args.batch_size} on {args.device}", prediction_rows(prediction))
                )
            elif args.what == "deadline":
                answer = client.check_deadline(_query(args), args.deadline_ms, confidence=args.confidence)
                verdict = "[green]feasible" if answer.feasible else "[red]infeasible"
                rows = [
                    ("verdict", verdict),
                    ("slack", f"{_fmt(answer.slack_ms)} ms"),
                    ("P(meets deadline)", _fmt(answer.probability, 4)),
                    ("deadline", f"{_fmt(answer.deadline_ms)} ms"),
                ]
                console.print(
                    _table(
                        f"{args.model}×{args.batch_size} on {args.device}",
                        rows + prediction_rows(answer.prediction),
                    )
                )
            elif args.what == "rank":
                _print_ranking(console, client, args)
            elif args.what == "plan":
                console.print(plan_table(_plan(client, args)))
        except ServiceError as exc:
            console.print(f"[red]{type(exc).__name__}[/red]: {exc}")
            return 1
        except ValueError as exc:  # a malformed option
            console.print(f"[red]error[/red]: {exc}")
            return 2
        except grpc.RpcError as exc:  # e.g. UNAUTHENTICATED, PERMISSION_DENIED
            console.print(f"[red]{exc.code().name}[/red]: {exc.details()}")
            return 1
    return 0


def _print_ranking(console: Any, client: Any, args: argparse.Namespace) -> None:
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    batch = BatchSpec(args.model, args.batch_size, parse_key_values(args.attr, "--attr"))
    ranking = client.rank_placements(
        batch, devices, args.deadline_ms, confidence=args.confidence, solo_latency_ms=args.solo_ms,
        where=_input(args),
    )
    table = Table(title=f"{args.model}×{args.batch_size}, deadline {ranking.deadline_ms:g} ms")
    for column in ("rank", "device", "feasible", "slack ms", "P(meet)", "predicted ms", "bound ms"):
        table.add_column(column, justify="right")
    for p in ranking.placements:
        table.add_row(
            str(p.rank),
            p.device,
            "yes" if p.feasible else "no",
            _fmt(p.slack_ms),
            _fmt(p.probability, 4),
            _fmt(p.prediction.latency_ms),
            _fmt(p.prediction.upper_bound_ms),
        )
    if ranking.delay is not None:
        table.caption = f"delay scheduling: {ranking.delay.choice}: {ranking.delay.reason}"
    console.print(table)


def parse_stage(text: str) -> PipelineStage:
    """``MODEL:BATCH[:SOLO_MS]`` to a pipeline stage."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3) or not parts[0]:
            raise ValueError
        solo = float(parts[2]) if len(parts) == 3 else None
        return PipelineStage(BatchSpec(parts[0], int(parts[1])), name=parts[0], solo_latency_ms=solo)
    except ValueError:
        raise ValueError(f"--stage: expected MODEL:BATCH[:SOLO_MS], got {text!r}") from None


def parse_edge(text: str) -> tuple[int, int]:
    """``FROM:TO`` to an edge."""
    try:
        u, v = text.split(":")
        return int(u), int(v)
    except ValueError:
        raise ValueError(f"--edge: expected FROM:TO (stage indices), got {text!r}") from None


def _plan(client: Any, args: argparse.Namespace) -> Any:
    stages = [parse_stage(s) for s in args.stage]
    edges = [parse_edge(e) for e in args.edge or []]
    names = [d.strip() for d in args.devices.split(",") if d.strip()]
    source = CoRunnerSource.EXPLICIT if args.idle else CoRunnerSource.AUTO
    devices = [Candidate(d, co_runner_source=source) for d in names]
    prices: list[float] = []
    if args.prices:
        try:
            prices = [float(p) for p in args.prices.split(",")]
        except ValueError:
            raise ValueError(f"--prices: expected a comma list of numbers, got {args.prices!r}") from None
    return client.plan_pipeline(
        stages, devices, args.deadline_ms, edges=edges, confidence=args.confidence,
        cost=PipelineCost.PRICE if prices else PipelineCost.BUSY_TIME, price_per_s=prices,
    )


def plan_table(plan: Any) -> Table:
    """A pipeline plan as a table, one row per stage."""
    verdict = "feasible" if plan.feasible else "INFEASIBLE"
    table = Table(
        title=f"pipeline: {verdict}; bound @ {plan.confidence:g} {plan.composed_bound_ms:.2f} ms "
        f"(sum of stage bounds {plan.sum_of_stage_bounds_ms:.2f}) for a deadline of {plan.deadline_ms:g} ms",
    )
    for column in ("stage", "device", "budget ms", "start ms", "expected ms", "bound ms", "cost"):
        table.add_column(column, justify="right")
    for s in plan.stages:
        table.add_row(f"{s.stage_index} {s.name}", s.device, _fmt(s.budget_ms), _fmt(s.expected_start_ms),
                      _fmt(s.expected_ms), _fmt(s.upper_bound_ms), _fmt(s.cost, 3))
    table.caption = (
        f"P(meets deadline) {plan.probability:.4f}; expected {plan.expected_ms:.2f} ms; cost {plan.cost:.3f}; "
        f"critical path {list(plan.critical_path)}; {plan.search}, {plan.plans_evaluated} plans evaluated"
        + ("" if plan.optimal else " (search limit reached)")
    )
    return table
