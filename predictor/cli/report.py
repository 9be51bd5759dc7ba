"""``predictor report LOG --target HOST:PORT``: stream a ``coloc/v1`` log into a running service.

The records go over ``ReportObservations`` in streams of ``--chunk`` records; after each
stream the service's counts (accepted, duplicates, rejected) are added up and shown on a
progress bar, and a summary table ends the run.

Exactly once: every record is sent under a producer id with a sequence number (its position
in the log, from ``--first-sequence``), so the service learns each record once however often
it is sent. The default producer id is derived from the log's first line: sending the same
log again, or a log a collector has appended to since, learns only the records not learned
yet (the others are counted as duplicates). A run cut short (a lost connection, records
refused over the service's rate limit) is finished by running the same command again.
``--producer-id`` names the producer explicitly; ``--no-exactly-once`` sends without one
(every send learns again).

Examples::

    predictor report run.jsonl.gz                               # localhost:50051
    predictor report run.jsonl.gz --target host:50051 --tolerant
    predictor report run.jsonl.gz --producer-id collector-7 --first-sequence 1
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from predictor.cli.query import add_client_security_arguments
from predictor.records.logio import ReadReport, iter_records, open_text
from predictor.records.record import Record

DEFAULT_CHUNK = 2000
SHOWN_REJECTIONS = 5

EPILOG = """\
Each record is sent with a producer id and a sequence number: the service learns it once
however often it is sent (the second send counts it as a duplicate). The default producer
id comes from the log's first line, so re-running the command after an interruption, or on
a log that has grown since, sends only what is new to the service's learning.

Examples:
  predictor report run.jsonl.gz                                # to localhost:50051
  predictor report run.jsonl.gz --target host:50051 --tolerant # skip bad lines, counted
  predictor report run.jsonl.gz --target host:50051 --tls-ca ca.pem --auth-token-file token
  predictor report run.jsonl.gz --producer-id collector-7      # name the producer yourself
"""


def register(subparsers: Any) -> None:
    """Add the ``report`` sub-command."""
    parser = subparsers.add_parser(
        "report",
        help="stream a coloc/v1 log into a running service (exactly once)",
        description=textwrap.fill(
            "Stream the records of a coloc/v1 log into a running prediction service over "
            "ReportObservations, with a progress bar and the accepted/duplicate/rejected counts.", 78),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("log", metavar="LOG", help="coloc/v1 log (.jsonl or .jsonl.gz)")
    parser.add_argument(
        "--target", default=os.environ.get("PREDICTOR_TARGET") or "localhost:50051",
        help="host:port (default $PREDICTOR_TARGET, else localhost:50051)",
    )
    parser.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="seconds per stream of --chunk records (default none)"
    )
    parser.add_argument(
        "--wait", type=float, default=30.0, metavar="S",
        help="seconds to wait for the service to be SERVING before sending (default 30)",
    )
    parser.add_argument(
        "--producer-id", metavar="ID",
        help="producer id of the records (default: derived from the log's first line)",
    )
    parser.add_argument(
        "--first-sequence", type=int, default=1, metavar="N",
        help="sequence number of the log's first record (default 1); the next ones follow",
    )
    parser.add_argument(
        "--no-exactly-once", action="store_true",
        help="send without producer id and sequence numbers: every send is learned again",
    )
    parser.add_argument(
        "--chunk", type=int, default=DEFAULT_CHUNK, metavar="N",
        help=f"records per stream; the counts are updated after each (default {DEFAULT_CHUNK})",
    )
    parser.add_argument("--tolerant", action="store_true", help="skip bad lines (counted) instead of stopping")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_client_security_arguments(parser)
    parser.set_defaults(func=run)


def default_producer_id(log: str) -> str:
    """``log-<16 hex>``: the hash of the log's first non-empty line.

    The same log, or the same log grown by appended records, gets the same id (and so the same
    sequence numbers for the records it already had); another recording gets another id.
    """
    with open_text(log) as stream:
        for line in stream:
            if line.strip():
                return "log-" + hashlib.sha256(line.strip().encode()).hexdigest()[:16]
    return "log-empty"


def count_records(log: str) -> int:
    """Non-empty lines of ``log``: the progress bar's total (bad lines included)."""
    with open_text(log) as stream:
        return sum(1 for line in stream if line.strip())


@dataclass
class ReportTotals:
    """What the streams of one ``predictor report`` did, added up."""

    sent: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    outliers: int = 0
    rate_limited: int = 0
    observations_learned: int = 0
    streams: int = 0
    rejections: list[tuple[int, str, str]] = field(default_factory=list)
    """``(record number in the log, 1-based; field; reason)`` of the first rejections."""

    def add(self, answer: Any, offset: int) -> None:
        """Add one stream's :class:`~predictor.service.types.ObservationReport`; ``offset``: the
        records of the log sent before that stream."""
        self.accepted += answer.accepted
        self.duplicates += answer.duplicates
        self.rejected += answer.rejected
        self.outliers += answer.outliers
        self.rate_limited += answer.rate_limited
        self.observations_learned = answer.observations_learned
        self.streams += 1
        for rejection in answer.rejections:
            if len(self.rejections) < SHOWN_REJECTIONS:
                self.rejections.append((offset + rejection.index + 1, rejection.field, rejection.reason))


def stream_log(
    client: Any,
    records: Iterator[Record],
    *,
    producer_id: str,
    first_sequence: int,
    chunk: int,
    timeout: float | None,
    on_sent: Callable[[int], None] = lambda n: None,
    on_stream: Callable[[ReportTotals], None] = lambda totals: None,
    totals: ReportTotals | None = None,
) -> ReportTotals:
    """Send ``records`` over ``client`` (an :class:`~predictor.rpc.client.InterferenceClient`) in streams
    of ``chunk``, the first numbered ``first_sequence`` under ``producer_id`` ("": no exactly-once
    numbering); ``on_sent(1)`` after each record taken into a message, ``on_stream(totals)`` after each
    stream's answer. Returns the totals (``totals``, when given, is filled in as it goes: what was
    acknowledged before an error)."""
    totals = totals if totals is not None else ReportTotals()
    while True:
        batch = list(itertools.islice(records, chunk))
        if not batch:
            return totals
        offset = totals.sent

        def sending(batch: list[Record] = batch) -> Iterator[Record]:
            for record in batch:
                yield record
                on_sent(1)

        answer = client.report_observations(
            sending(), timeout, producer_id=producer_id,
            first_sequence=first_sequence + offset if producer_id else 0,
        )
        totals.sent += len(batch)
        totals.add(answer, offset)
        on_stream(totals)


def summary_table(log: str, totals: ReportTotals, read: ReadReport, producer_id: str) -> Table:
    """The run's counts as a table."""
    table = Table(title=f"{log} -> service", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("records read", f"{read.accepted}" + (f" ({read.skipped} bad lines skipped)" if read.skipped else ""))
    table.add_row("sent", f"{totals.sent} in {totals.streams} streams")
    table.add_row("accepted (learned)", str(totals.accepted))
    table.add_row("duplicates (already learned)", str(totals.duplicates))
    rejected = str(totals.rejected)
    if totals.rejected:
        rejected += f" ({totals.outliers} outliers, {totals.rate_limited} over the rate limit)"
    table.add_row("rejected", rejected)
    table.add_row("producer id", escape(producer_id) if producer_id else "none (--no-exactly-once)")
    table.add_row("service: observations learned", str(totals.observations_learned))
    for number, where, reason in totals.rejections:
        table.add_row(f"[red]rejected record #{number}", escape(f"{where}: {reason}"))
    return table


def run(args: argparse.Namespace) -> int:
    """Entry of ``predictor report``: 0 when every record was sent, 1 when the service refused or was
    unreachable, 2 on a bad option or a bad line (without ``--tolerant``)."""
    import grpc  # heavy: not at CLI registration

    from predictor.cli.query import client_from_args  # grpc inside
    from predictor.records.record import RecordError
    from predictor.service import ServiceError

    if args.chunk < 1:
        raise ValueError(f"--chunk: expected a number of records >= 1, got {args.chunk}")
    if args.first_sequence < 1:
        raise ValueError(f"--first-sequence: expected a sequence number >= 1, got {args.first_sequence}")
    if args.no_exactly_once and args.producer_id:
        raise ValueError("--producer-id and --no-exactly-once exclude each other")
    producer_id = "" if args.no_exactly_once else (args.producer_id or default_producer_id(args.log))
    out = Console()
    err = Console(stderr=True)
    read = ReadReport()
    totals = ReportTotals()
    show_bar = not args.quiet and err.is_terminal
    total = count_records(args.log) if show_bar else None
    records = iter_records(args.log, tolerant=args.tolerant, report=read)
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[accepted]} accepted, {task.fields[duplicates]} duplicate, "
                   "{task.fields[rejected]} rejected"),
        TimeElapsedColumn(), console=err, disable=not show_bar,
    )
    task = progress.add_task("report", total=total, accepted=0, duplicates=0, rejected=0)

    def on_stream(t: ReportTotals) -> None:
        progress.update(task, accepted=t.accepted, duplicates=t.duplicates, rejected=t.rejected)

    status = 0
    with client_from_args(args) as client:
        try:
            client.wait_ready(args.wait)
            with progress:
                stream_log(
                    client, records, producer_id=producer_id, first_sequence=args.first_sequence,
                    chunk=args.chunk, timeout=args.timeout, on_sent=lambda n: progress.advance(task, n),
                    on_stream=on_stream, totals=totals,
                )
        except TimeoutError as exc:
            err.print(f"[red]Unavailable[/red]: {escape(str(exc))} at {escape(args.target)} (--target, --wait)", soft_wrap=True)
            return 1
        except RecordError as exc:
            err.print(f"[red]error[/red]: {escape(args.log)}: {escape(str(exc))} (--tolerant skips bad lines)", soft_wrap=True)
            status = 2
        except ServiceError as exc:
            err.print(f"[red]{type(exc).__name__}[/red]: {escape(str(exc))}", soft_wrap=True)
            status = 1
        except grpc.RpcError as exc:  # e.g. UNAUTHENTICATED, PERMISSION_DENIED
            hint = {
                grpc.StatusCode.UNAUTHENTICATED: " (give a token with --auth-token-file, or a client certificate "
                "with --tls-cert and --tls-key)",
                grpc.StatusCode.PERMISSION_DENIED: " (the service needs a credential allowed to report observations)",
            }.get(exc.code(), "")
            err.print(f"[red]{exc.code().name}[/red]: {escape(str(exc.details()))}{hint}", soft_wrap=True)
            status = 1
    out.print(summary_table(args.log, totals, read, producer_id))
    if status and producer_id:
        out.print(f"{totals.sent} records sent and acknowledged before the error; once it is mended, run the "
                  "same command again: those are counted as duplicates, not learned twice")
    elif totals.rate_limited and producer_id:
        out.print(f"{totals.rate_limited} records were refused over the service's rate limit: run the same "
                  "command again later to send them (the others are counted as duplicates)")
    if read.skipped:
        out.print(f"[yellow]{escape(read.summary())}[/]")
    sys.stdout.flush()
    return status
