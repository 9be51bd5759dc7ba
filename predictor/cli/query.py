"""``predictor query``: ask a running service from the command line, answers as tables.

Examples (against ``predictor serve`` on the default port)::

    predictor query status
    predictor query predict --device cpu0 --model resnet --batch-size 4
    predictor query predict --device cpu0 --model resnet --batch-size 4 --idle --learned-only
    predictor query predict --device gpu0 --model vgg19 --batch-size 1 \\
        --attr l2_util=0.07 --co-runner vgg19:4:0.8 --solo-ms 5.5
    predictor query deadline --device cpu0 --model bert --batch-size 2 --deadline-ms 40
    predictor query rank --devices cpu0,cpu1 --idle --model mlp --batch-size 8 --deadline-ms 30
    predictor query rank --devices cpu0,cpu1 --co-runner cpu0=resnet:4 --idle --model mlp --batch-size 8 \\
        --deadline-ms 30
    predictor query plan --stage resnet:8 --stage bert:4 --stage mlp:8 --edge 0:1 --edge 0:2 \\
        --devices cpu0,cpu1 --idle --deadline-ms 120 [--prices 1.0,2.5]

Where the co-runners come from: by default the service's live view of each device (what
collectors reported started there), which exists only for devices the service has seen;
``--idle`` says a device runs nothing else, ``--co-runner MODEL:BATCH[:OVERLAP]`` (repeatable)
says what runs there (in ``rank`` and ``plan``, ``DEVICE=MODEL:BATCH[:OVERLAP]`` for one device).
An answer the service guessed, for a model or device kind it never observed, is printed under
a loud ``UNKNOWN MODEL: fallback guess`` line; ``--learned-only`` refuses it instead. Errors
name the flag to change.
"""

from __future__ import annotations

import argparse
import math
import os
import textwrap
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from predictor.cli.flag_errors import describe
from predictor.records.record import BatchSpec
from predictor.service import Candidate, CoRunnerSource, PlannedCoRunner, Query, ServiceError
from predictor.service.errors import Unavailable
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


QUERY_EPILOG = """\
Examples:
  predictor query status
  predictor query --target host:50051 predict --device cpu0 --model resnet --batch-size 4 --idle
  predictor query deadline --device cpu0 --model bert --batch-size 2 --co-runner resnet:4 --deadline-ms 40
  predictor query rank --devices cpu0,cpu1 --idle --model mlp --batch-size 8 --deadline-ms 30
  predictor query plan --stage resnet:8 --stage bert:4 --edge 0:1 --devices cpu0,cpu1 --idle \\
      --deadline-ms 120

The options before WHAT (--target, --timeout, security) are the connection's; see
`predictor query WHAT --help` for each question's options and examples.
"""
PREDICT_EPILOG = """\
Examples:
  predictor query predict --device cpu0 --model resnet --batch-size 4            # live view of cpu0
  predictor query predict --device cpu0 --model resnet --batch-size 4 --idle     # cpu0 runs nothing else
  predictor query predict --device cpu1 --device-kind "AMD EPYC" --model bert --batch-size 2 \\
      --co-runner resnet:4:0.8 --co-runner mlp:8
  predictor query predict --device cpu0 --model llama --batch-size 1 --idle --learned-only

The answer lists the signals and overlaps the service filled in itself ("estimated") and
flags a guess for a model or device kind it never observed (UNKNOWN MODEL: fallback guess).
"""
DEADLINE_EPILOG = """\
Examples:
  predictor query deadline --device cpu0 --model bert --batch-size 2 --deadline-ms 40
  predictor query deadline --device cpu0 --model bert --batch-size 2 --idle --deadline-ms 40 --confidence 0.95
  predictor query deadline --device cpu1 --model mlp --batch-size 8 --co-runner resnet:4:0.5 \\
      --deadline-ms 25 --learned-only
"""
RANK_EPILOG = """\
Examples:
  predictor query rank --devices cpu0,cpu1 --model mlp --batch-size 8 --deadline-ms 30     # live views
  predictor query rank --devices cpu0,cpu1 --idle --model mlp --batch-size 8 --deadline-ms 30
  predictor query rank --devices cpu0,cpu1 --co-runner cpu0=resnet:4:0.8 --idle \\
      --model mlp --batch-size 8 --deadline-ms 30    # cpu0 runs resnet x4, cpu1 nothing

Devices the service has not seen have no live view: give --idle or --co-runner for them.
"""
PLAN_EPILOG = """\
Examples:
  predictor query plan --stage resnet:8 --stage bert:4 --edge 0:1 --devices cpu0,cpu1 --idle \\
      --deadline-ms 120
  predictor query plan --stage resnet:8 --stage bert:4 --stage mlp:8 --edge 0:1 --edge 0:2 \\
      --devices cpu0,cpu1 --co-runner cpu1=vgg:2 --idle --deadline-ms 150 --prices 1.0,2.5

Devices the service has not seen have no live view: give --idle or --co-runner for them.
--learned-only refuses a plan that any stage answered from a fallback guess.
"""
STATUS_EPILOG = """\
Examples:
  predictor query status
  predictor query --target host:50051 --tls-ca ca.pem status
"""


def register(subparsers: Any) -> None:
    """Add the ``query`` sub-command and its ``predict``, ``deadline``, ``rank``, ``plan`` and ``status``."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = subparsers.add_parser(
        "query",
        help="ask a running service: predict, deadline, rank, plan, status",
        description="Ask a running prediction service and print the answer.",
        epilog=QUERY_EPILOG,
        formatter_class=raw,
    )
    parser.add_argument(
        "--target", default=os.environ.get("PREDICTOR_TARGET") or "localhost:50051",
        help="host:port (default $PREDICTOR_TARGET, else localhost:50051)",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call (default 10)")
    add_client_security_arguments(parser)
    what = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    predict = what.add_parser(
        "predict", help="predicted latency and upper bound of a batch on a device",
        description="Predicted latency and upper bound of a batch on one device.",
        epilog=PREDICT_EPILOG, formatter_class=raw,
    )
    add_placement_arguments(predict)
    add_batch_arguments(predict)
    deadline = what.add_parser(
        "deadline", help="whether a batch meets a deadline on a device",
        description=textwrap.fill(
            "Whether a batch meets a deadline on one device, with the slack and its probability.", 78),
        epilog=DEADLINE_EPILOG, formatter_class=raw,
    )
    add_placement_arguments(deadline)
    add_batch_arguments(deadline)
    deadline.add_argument("--deadline-ms", type=float, required=True, help="deadline, ms from now")
    rank = what.add_parser(
        "rank", help="rank candidate devices for a batch",
        description="Rank candidate devices for one batch, most slack first.",
        epilog=RANK_EPILOG, formatter_class=raw,
    )
    rank.add_argument("--devices", required=True, help="comma list of devices")
    add_candidate_arguments(rank)
    add_batch_arguments(rank)
    rank.add_argument("--deadline-ms", type=float, required=True, help="deadline, ms from now")
    pipeline = what.add_parser(
        "plan", help="plan a pipeline: a device and a budget per stage for one deadline",
        description=textwrap.fill(
            "Plan a pipeline of stages: a device and a latency budget per stage so that the "
            "end-to-end bound meets one deadline.", 78),
        epilog=PLAN_EPILOG, formatter_class=raw,
    )
    pipeline.add_argument("--stage", action="append", required=True, metavar="MODEL:BATCH[:SOLO_MS]",
                          help="a stage (repeatable, in order)")
    pipeline.add_argument("--edge", action="append", metavar="FROM:TO",
                          help="stage FROM must end before stage TO starts (repeatable); none: a chain")
    pipeline.add_argument("--devices", required=True, help="comma list of candidate devices")
    add_candidate_arguments(pipeline)
    pipeline.add_argument("--deadline-ms", type=float, required=True, help="end-to-end deadline, ms from now")
    pipeline.add_argument("--confidence", type=float, help="confidence of the bound (default: the service's)")
    pipeline.add_argument("--prices", help="comma list of prices per busy second, one per device: minimise price")
    pipeline.add_argument("--learned-only", action="store_true",
                          help="refuse the plan when any stage's answer is a fallback guess")
    what.add_parser(
        "status", help="observations learned, rolling error, coverage, drift alarms",
        description=textwrap.fill(
            "The service's learning state: observations, rolling error, coverage and drift per "
            "device kind.", 78),
        epilog=STATUS_EPILOG, formatter_class=raw,
    )
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
    parser.add_argument(
        "--learned-only",
        action="store_true",
        help="refuse (exit 1) rather than print a fallback guess for a model or device kind never observed",
    )


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


def add_candidate_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options saying what runs on the ``--devices`` of ``rank`` and ``plan`` (kind, co-runners)."""
    parser.add_argument(
        "--device-kind", default="", help="device kind of the devices (default: what the service knows of each)"
    )
    parser.add_argument(
        "--co-runner",
        action="append",
        metavar="[DEVICE=]MODEL:BATCH[:OVERLAP|:+REMAINING_MS]",
        help="what runs on DEVICE (repeatable); without DEVICE=, on every device. A device given none "
        "is idle with --idle, else the service's live view of it",
    )
    parser.add_argument(
        "--idle",
        action="store_true",
        help="the devices given no --co-runner run nothing else (no live view: works for devices the "
        "service has not seen)",
    )


def candidates_from_args(args: argparse.Namespace, devices: list[str]) -> list[Candidate]:
    """One :class:`Candidate` per device of ``--devices``, with what ``--co-runner`` and ``--idle`` say
    runs there (``ValueError`` naming the flag for a device that is not in ``--devices``)."""
    shared: list[PlannedCoRunner] = []
    own: dict[str, list[PlannedCoRunner]] = {}
    for text in args.co_runner or []:
        device, sep, runner = text.partition("=")
        if not sep:
            shared.append(parse_co_runner(text))
            continue
        if device not in devices:
            raise ValueError(f"--co-runner {text!r}: device {device!r} is not one of --devices {','.join(devices)}")
        own.setdefault(device, []).append(parse_co_runner(runner))
    out = []
    for device in devices:
        runners = tuple(shared + own.get(device, []))
        explicit = bool(runners) or args.idle
        out.append(Candidate(device, args.device_kind, runners,
                             CoRunnerSource.EXPLICIT if explicit else CoRunnerSource.AUTO))
    return out


def _devices(args: argparse.Namespace) -> list[str]:
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    if not devices:
        raise ValueError(f"--devices: expected a comma list of devices, got {args.devices!r}")
    return devices


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
        learned_only=args.learned_only,
        input=_input(args),
    )


def _fmt(value: float, digits: int = 2) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


FALLBACK_LINE = "UNKNOWN MODEL: fallback guess"
"""The line printed above an answer the service guessed (a model or device kind it never observed)."""


def fallback_warning(what: str, known_kinds: list[str] | None = None) -> str:
    """The loud line (rich markup) printed before an answer about ``what`` that is a fallback guess.

    ``known_kinds`` (given when a device of the answer has no kind the service knows): the kinds
    it has learned, offered for ``--device-kind``."""
    text = (
        f"[bold red]{FALLBACK_LINE}[/]: the service has not learned {escape(what)} on this device kind; the "
        "latency and bound below are a wide guess, not a learned answer (--solo-ms gives the solo latency; "
        "--learned-only refuses instead)"
    )
    if known_kinds is not None:
        text += "; a device the service has not seen has no kind: give it with --device-kind"
        if known_kinds:
            text += escape(" (learned kinds: " + ", ".join(repr(k) for k in known_kinds) + ")")
    return text


def _warn_fallback(console: Any, client: Any, what: str, predictions: list[Any]) -> None:
    """Print the loud fallback line when any of ``predictions`` is a fallback guess."""
    guessed = [p for p in predictions if p.fallback]
    if not guessed:
        return
    known = None
    if any(not p.device_kind for p in guessed):  # an unseen device without --device-kind
        known = [k.device_kind for k in client.status().device_kinds if k.device_kind]
    console.print(fallback_warning(what, known))


def estimated_text(estimated: tuple[str, ...] | list[str]) -> str:
    """What the service filled in itself, in words: ``11 signals (run_queue, ...)``, the overlap of
    the 1st --co-runner, ...; ``"nothing"`` when the query gave everything."""
    signals = [e.removeprefix("signals.") for e in estimated if e.startswith("signals.")]
    parts = [f"{len(signals)} signal{'s' * (len(signals) != 1)} ({', '.join(signals)})"] if signals else []
    for item in estimated:
        if item.startswith("signals."):
            continue
        index, sep, rest = item.removeprefix("co_runners[").partition("].")
        if item.startswith("co_runners[") and sep and index.isdigit():
            parts.append(f"{rest} of co-runner {int(index) + 1}")
        else:
            parts.append(item)
    return "; ".join(parts) or "nothing"


def prediction_rows(prediction: Any, co_runner_source: str = "") -> list[tuple[str, str]]:
    """``(label, value)`` rows describing a :class:`~predictor.service.types.Prediction`.

    ``co_runner_source`` says where the co-runners came from (``--idle``, ``--co-runner``, the live
    view), printed beside them."""
    runners = (
        ", ".join(f"{c.model}×{c.batch_size} ({c.overlap:.2f})" for c in prediction.co_runners) or "none"
    )
    if co_runner_source:
        runners += f" ({co_runner_source})"
    transfer = [("transfer", f"{_fmt(prediction.transfer_ms)} ms over the {prediction.transfer_link} link "
                             f"(bound {_fmt(prediction.transfer_bound_ms)} ms)")] if prediction.transfer_link else []
    return transfer + [
        ("predicted latency", f"{_fmt(prediction.latency_ms)} ms"),
        ("solo latency", f"{_fmt(prediction.solo_latency_ms)} ms"),
        ("slowdown", f"{_fmt(prediction.slowdown, 3)}×"),
        (f"upper bound @ {prediction.confidence:g}", f"{_fmt(prediction.upper_bound_ms)} ms"),
        ("bound from", f"{prediction.bound_source.value} ({prediction.residuals} residuals)"
                       + (": FALLBACK GUESS, never observed" if prediction.fallback else "")),
        ("co-runners (overlap)", runners),
        ("estimated by the service", estimated_text(prediction.estimated)),
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
        # The numbers' columns as wide as the header's longest word (8 at least): at 80 columns a header
        # wraps between words, never cut; the device kind takes the width left.
        if column == "device kind":
            table.add_column(column, min_width=6)
        else:
            table.add_column(column, justify="right", width=max(8, *(len(word) for word in column.split())))
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
                _warn_fallback(console, client, f"{args.model}×{args.batch_size}", [prediction])
                console.print(
                    _table(f"{args.model}×{args.batch_size} on {args.device}",
                           prediction_rows(prediction, _source_words(args)))
                )
            elif args.what == "deadline":
                answer = client.check_deadline(_query(args), args.deadline_ms, confidence=args.confidence)
                _warn_fallback(console, client, f"{args.model}×{args.batch_size}", [answer.prediction])
                verdict = "[green]feasible" if answer.feasible else "[red]infeasible"
                rows = [
                    ("verdict", verdict + (" (from a fallback guess)" if answer.prediction.fallback else "")),
                    ("slack", f"{_fmt(answer.slack_ms)} ms"),
                    ("P(meets deadline)", _fmt(answer.probability, 4)),
                    ("deadline", f"{_fmt(answer.deadline_ms)} ms"),
                ]
                console.print(
                    _table(
                        f"{args.model}×{args.batch_size} on {args.device}",
                        rows + prediction_rows(answer.prediction, _source_words(args)),
                    )
                )
            elif args.what == "rank":
                _print_ranking(console, client, args)
            elif args.what == "plan":
                plan = _plan(client, args)
                guessed = [s for s in plan.stages if s.prediction.fallback]
                if guessed and args.learned_only:
                    names = ", ".join(f"{s.stage_index} {s.name} on {s.device}" for s in guessed)
                    console.print(escape(f"FailedPrecondition: --learned-only: stage {names} would be planned "
                                         "from a fallback guess (a model or device kind never observed); no plan"),
                                  soft_wrap=True)
                    return 1
                _warn_fallback(console, client, ", ".join(f"stage {s.stage_index} ({s.name})" for s in guessed),
                               [s.prediction for s in guessed])
                console.print(plan_table(plan))
        except ServiceError as exc:
            devices = _devices(args) if getattr(args, "devices", None) else []
            text = describe(exc, devices=devices).removeprefix(type(exc).__name__)
            if isinstance(exc, Unavailable):
                text += f" (is the service running and ready at --target {args.target}?)"
            console.print(f"[red]{type(exc).__name__}[/red]" + escape(text), soft_wrap=True)
            return 1
        except ValueError as exc:  # a malformed option
            console.print(f"[red]error[/red]: {escape(str(exc))}", soft_wrap=True)
            return 2
        except grpc.RpcError as exc:  # e.g. UNAUTHENTICATED, PERMISSION_DENIED
            hint = ""
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                hint = " (give a token with --auth-token-file, or a client certificate with --tls-cert and --tls-key)"
            console.print(f"[red]{exc.code().name}[/red]: {escape(str(exc.details()))}{hint}", soft_wrap=True)
            return 1
    return 0


def _source_words(args: argparse.Namespace) -> str:
    """Where the co-runners of ``predict``/``deadline`` came from, in the flags' words."""
    if args.co_runner:
        return "--co-runner"
    return "--idle: runs nothing else" if args.idle else "the service's live view"


def _print_ranking(console: Any, client: Any, args: argparse.Namespace) -> None:
    devices = _devices(args)
    batch = BatchSpec(args.model, args.batch_size, parse_key_values(args.attr, "--attr"))
    ranking = client.rank_placements(
        batch, candidates_from_args(args, devices), args.deadline_ms, confidence=args.confidence,
        solo_latency_ms=args.solo_ms, learned_only=args.learned_only, where=_input(args),
    )
    guessed = [p.device for p in ranking.placements if p.prediction.fallback]
    _warn_fallback(console, client, f"{args.model}×{args.batch_size} (on {', '.join(guessed)})",
                   [p.prediction for p in ranking.placements])
    table = Table(title=f"{args.model}×{args.batch_size}, deadline {ranking.deadline_ms:g} ms")
    for column in ("rank", "device", "feasible", "slack ms", "P(meet)", "predicted ms", "bound ms", "answer"):
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
            "[red]GUESS" if p.prediction.fallback else "learned",
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
    devices = candidates_from_args(args, _devices(args))
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
