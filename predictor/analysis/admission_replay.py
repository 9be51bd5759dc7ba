"""Admission-time replay: how good are the answers a scheduler gets *before* it dispatches?

Records are streamed in order through a fresh :class:`~predictor.service.core.Service`.
Before each is learned, the service is asked the admission-time question about its batch
(its co-runners without overlaps, no signals, its solo latency when the record has one:
what a scheduler knows before dispatch); after, the answer is scored against the latency the
batch really had: coverage of the bounds at 0.95 and 0.99, their width (upper bound /
actual latency), and the error of the point prediction, over all records and per number
of co-runners. Answers refused for want of any basis (nothing learned yet) are counted apart.

:func:`partial_overlap_records` makes a synthetic log whose co-runners (0 to 3) overlap
the batch partially, with device signals that reflect the crowding: the information an
admission-time question lacks.

:func:`replay_demo` asks the questions the demo's scheduler asked (:func:`demo_questions`: co-runners
by their time left, reconstructed from a log saved by ``predictor demo --save``) in the order the
demo asked them and learned the records, offline and deterministic.

:func:`information_floor` measures what that lack costs any learner: the prequential error of a
learner that sees each record only as the admission-time question sees it (:func:`admission_form`:
every overlap full, no signals). An answer before dispatch cannot be expected to beat it; the error
once the batch ran (:func:`prequential_mape` of the records themselves) is the other yardstick.

Examples
--------
>>> result = replay(partial_overlap_records(300, seed=1), "synthetic")
>>> result.answered, sorted(result.by_count) == [0, 1, 2, 3]
(300, True)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from predictor.calibration.shapes import count_bucket, count_label
from predictor.predictors import create
from predictor.prequential import tree_blocks
from predictor.prequential.evaluation import summarize
from predictor.records.record import BatchSpec, CoRunner, Record
from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.errors import FailedPrecondition, ServiceError
from predictor.service.types import CoRunnerSource, PlannedCoRunner, Query, Status

LEVELS = (0.95, 0.99)
MAX_BATCH_S = 10.0
"""No batch of a demo log runs longer than this (seconds): :func:`demo_questions` looks no further back."""
SLO = 2.0
"""Deadline of a batch, as a multiple of its solo latency, for the admission rate."""


def admission_query(record: Record) -> Query:
    """The question a scheduler can ask before dispatching ``record``'s batch."""
    return Query(
        device=record.device,
        batch=record.batch,
        device_kind=record.device_kind,
        co_runners=tuple(PlannedCoRunner(r.model, r.batch_size, r.attrs) for r in record.co_runners),
        co_runner_source=CoRunnerSource.EXPLICIT,
        solo_latency_ms=record.solo_latency_ms,
    )


def admission_form(record: Record) -> Record:
    """``record`` as the admission-time question knows it: its co-runners, each overlapping it fully (the
    overlap is not known before dispatch), and no device signals."""
    return dataclasses.replace(record, signals={},
                               co_runners=tuple(dataclasses.replace(c, overlap=1.0) for c in record.co_runners))


def prequential_mape(records: Sequence[Record], spec: str) -> float:
    """MAPE (%) of ``create(spec)`` predicting each record, then learning it, in order (by the fastest
    exact path: :func:`~predictor.prequential.tree_blocks.fastest_prequential`)."""
    return 100.0 * summarize(tree_blocks.fastest_prequential(create(spec), list(records)))["mape"]


def information_floor(records: Sequence[Record], spec: str) -> float:
    """:func:`prequential_mape` of ``records`` in their :func:`admission_form`: the error of a learner that
    knows, before and after each batch, only what a scheduler's question knows before dispatch."""
    return prequential_mape([admission_form(r) for r in records], spec)


@dataclass
class Slice:
    """Scores of the answers of one slice of records."""

    n: int = 0
    covered: dict[float, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    widths: dict[float, list[float]] = field(default_factory=lambda: {c: [] for c in LEVELS})
    ape: float = 0.0
    solo_ape: float = 0.0
    admitted: int = 0  # with a deadline of slo x solo, bound at 0.95 within it
    admitted_met: int = 0
    with_deadline: int = 0

    def add(self, actual: float, predicted: float, uppers: dict[float, float], solo: float | None,
            slo: float = SLO) -> None:
        """Score one answer (and, with a solo latency, the admission at a deadline of ``slo x solo``)."""
        self.n += 1
        if solo:
            self.with_deadline += 1
            if uppers[0.95] <= slo * solo:
                self.admitted += 1
                self.admitted_met += actual <= slo * solo
        for c, upper in uppers.items():
            self.covered[c] += actual <= upper
            self.widths[c].append(upper / actual)
        self.ape += abs(actual - predicted) / actual
        self.solo_ape += abs(actual - (solo if solo else predicted)) / actual

    def coverage(self, c: float) -> float:
        """Fraction of actual latencies within the bound at ``c``."""
        return self.covered[c] / self.n if self.n else math.nan

    def width(self, c: float) -> float:
        """Median of upper bound / actual latency at ``c``."""
        return float(np.median(self.widths[c])) if self.widths[c] else math.nan

    @property
    def admission_rate(self) -> float:
        """Share of the batches (with a solo latency) whose 0.95 bound meets a deadline of ``SLO x solo``."""
        return self.admitted / self.with_deadline if self.with_deadline else math.nan

    @property
    def met_rate(self) -> float:
        """Share of those admitted that met the deadline."""
        return self.admitted_met / self.admitted if self.admitted else math.nan

    @property
    def mape(self) -> float:
        """Mean absolute percentage error of the predicted latency (%)."""
        return 100.0 * self.ape / self.n if self.n else math.nan

    @property
    def solo_mape(self) -> float:
        """The same, predicting the solo latency alone (interference ignored) (%)."""
        return 100.0 * self.solo_ape / self.n if self.n else math.nan


@dataclass
class ReplayResult:
    """What an admission replay of one dataset measured."""

    dataset: str
    records: int = 0
    answered: int = 0
    refused: int = 0  # no basis for an answer yet (FAILED_PRECONDITION)
    fallback: int = 0  # answered from the wide fallback (unseen model or kind)
    total: Slice = field(default_factory=Slice)
    by_count: dict[int, Slice] = field(default_factory=dict)
    status: Status | None = None  # the service's status at the end (admission-time slices included)

    def rows(self) -> list[tuple[str, Slice]]:
        """``(label, slice)``: all, then per co-runner count."""
        return [("all", self.total)] + [(f"{count_label(k)} co-runners", self.by_count[k])
                                        for k in sorted(self.by_count)]


def replay(records: Iterable[Record], dataset: str = "", config: ServiceConfig | None = None,
           block: int = 1) -> ReplayResult:
    """Stream ``records`` through a fresh service, asking the admission-time question before each
    is learned and scoring its answer after.

    ``block``: records are streamed as the service learns an observation stream, in messages of
    ``block`` records (:meth:`Service.report_observations
    <predictor.service.core.Service.report_observations>`); the questions about a message's
    batches are asked before the message is sent, of the version the service answers from then,
    as the service's own degraded replay asks them (:func:`~predictor.service.replay_block.replay_block`). 1: each record is learned before the
    next question (the service's per-record path).
    """
    config = config or ServiceConfig(snapshot_every_s=0, observation_log=False, outlier_gate=False)
    if not 1 <= block <= config.publish_every_records:
        raise ValueError(f"block must lie in [1, publish_every_records={config.publish_every_records}] "
                         f"(the service's longest block), got {block!r}")
    service = Service(config)
    service.open()
    result = ReplayResult(dataset)
    pending: list[Record] = []
    for record in records:
        pending.append(record)
        if len(pending) >= block:
            _replay_block(service, pending, result)
            pending.clear()
    _replay_block(service, pending, result)
    result.status = service.status()
    service.close()
    return result


def _replay_block(service: Service, records: list[Record], result: ReplayResult) -> None:
    """Ask the admission-time question of each record, then learn them, then score the answers."""
    if not records:
        return
    asked = []
    for record in records:
        result.records += 1
        query = admission_query(record)
        try:
            asked.append({c: service.predict(query, c) for c in LEVELS})
        except FailedPrecondition:
            asked.append(None)
            result.refused += 1
    if len(records) == 1:
        service.observe(records[0])
    else:
        service.report_observations([(record, "") for record in records])
    for record, answers in zip(records, asked, strict=True):
        if answers is None:
            continue
        actual = record.latency_ms
        assert actual is not None
        first = answers[LEVELS[0]]
        result.answered += 1
        result.fallback += first.fallback
        uppers = {c: a.upper_bound_ms for c, a in answers.items()}
        for target in (result.total, result.by_count.setdefault(count_bucket(len(record.co_runners)), Slice())):
            target.add(actual, first.latency_ms, uppers, record.solo_latency_ms)


def demo_questions(records: Sequence[Record], lag_s: float = 0.1) -> list[tuple[int, Query | None]]:
    """The demo's scheduler and observation stream, reconstructed from a saved demo log (``predictor
    demo --save LOG``: the records of one device, two workers): in time order, ``(i, query)`` for the
    question asked about record ``i``'s batch at its start and ``(i, None)`` for record ``i`` learned,
    ``lag_s`` after its end (the collector's emission delay).

    As the demo asks it (:class:`~predictor.cli.demo.SampleScheduler`): the batch beside it is the
    one running on the other worker when it starts (the latest started before it that has not ended),
    given by its time left (its solo latency less the time it has run), no signals, its solo latency,
    and a batch id (``b{i}``) that its observation carries. A batch dispatched while both workers were
    busy was asked about earlier than its start: this reconstruction asks it at its start.
    """
    starts = sorted(range(len(records)), key=lambda i: records[i].start_s or 0.0)
    events: list[tuple[float, int, int, Query | None]] = []
    for position, i in enumerate(starts):
        record = records[i]
        start = record.start_s or 0.0
        runners: tuple[PlannedCoRunner, ...] = ()
        for j in (starts[k] for k in range(position - 1, -1, -1)):
            other = records[j]
            other_start = other.start_s or 0.0
            assert other.latency_ms is not None
            if other_start + other.latency_ms / 1e3 > start:
                left = max((other.solo_latency_ms or other.latency_ms) - 1e3 * (start - other_start), 0.0)
                runners = (PlannedCoRunner(other.batch.model, other.batch.batch_size, other.batch.attrs,
                                           remaining_ms=left),)
                break
            if start - other_start > MAX_BATCH_S:
                break
        query = Query(device=record.device, batch=record.batch, device_kind=record.device_kind, co_runners=runners,
                      co_runner_source=CoRunnerSource.EXPLICIT, solo_latency_ms=record.solo_latency_ms,
                      batch_id=f"b{i}")
        assert record.latency_ms is not None
        events.append((start, 0, i, query))
        events.append((start + record.latency_ms / 1e3 + lag_s, 1, i, None))
    events.sort(key=lambda e: (e[0], e[1]))
    return [(i, query) for _, _, i, query in events]


def after_warmup(records: Sequence[Record], warmup_s: float) -> np.ndarray:
    """Whether each record of a demo log started ``warmup_s`` or more after the first one (the demo
    scores those: before, every batch is dispatched and nothing is scored)."""
    starts = np.array([r.start_s or 0.0 for r in records], dtype=float)
    return starts >= (starts.min() if starts.size else 0.0) + warmup_s


def replay_demo(records: Sequence[Record], config: ServiceConfig, warm_start: str | None = None,
                warmup_s: float = 0.0) -> ReplayResult:
    """Ask a fresh service (warm-started from ``warm_start``) the demo's questions about a saved demo
    log's records, learning each record as the demo's stream delivers it (:func:`demo_questions`);
    the answers about the records :func:`after_warmup` are scored, per number of co-runners the
    question named. Records the service refuses to learn (its outlier gate) are skipped, as the
    demo's stream reports them."""
    scored = after_warmup(records, warmup_s)
    service = Service(config)
    service.open(warm_start=warm_start)
    result = ReplayResult("demo")
    for i, query in demo_questions(records):
        record = records[i]
        if query is None:
            try:
                service.observe(record, f"b{i}")
            except ServiceError:
                pass
            continue
        result.records += 1
        first = service.predict(query, LEVELS[0])
        wider = service.predict(dataclasses.replace(query, batch_id=""), LEVELS[1])
        if not scored[i]:
            continue
        assert record.latency_ms is not None
        result.answered += 1
        result.fallback += first.fallback
        uppers = {LEVELS[0]: first.upper_bound_ms, LEVELS[1]: wider.upper_bound_ms}
        for target in (result.total, result.by_count.setdefault(count_bucket(len(query.co_runners)), Slice())):
            target.add(record.latency_ms, first.latency_ms, uppers, record.solo_latency_ms)
    result.status = service.status()
    service.close()
    return result


def prequential_mape_after(before: Sequence[Record], records: Sequence[Record], spec: str,
                           scored: np.ndarray | None = None) -> float:
    """MAPE (%) of ``create(spec)`` on the ``scored`` ones of ``records`` (default: all), replayed
    prequentially after ``before`` (a warm start)."""
    predicted = np.asarray(tree_blocks.fastest_prequential(create(spec), [*before, *records]).predicted)[len(before):]
    measured = np.array([r.latency_ms for r in records], dtype=float)
    keep = np.ones(measured.size, dtype=bool) if scored is None else scored
    return float(100.0 * np.mean(np.abs(predicted - measured)[keep] / measured[keep])) if keep.any() else math.nan


def partial_overlap_records(n: int, seed: int = 0, noise: float = 0.08) -> list[Record]:
    """A synthetic log: 0 to 3 co-runners overlapping the batch partially, and device signals.

    Latency is ``solo * (1 + sum_i overlap_i * weight_i) * lognormal(noise)``, with
    ``weight_i`` set by the co-runner's memory traffic; the signal ``busy`` is the sum of the
    overlaps (what a device would measure during the batch), unknown before dispatch.
    """
    rng = np.random.default_rng(seed)
    models = {"resnet": (0.3, 8.0), "bert": (0.6, 12.0), "mlp": (0.2, 4.0), "vgg": (0.9, 15.0)}
    names = sorted(models)
    out = []
    for i in range(n):
        model = names[rng.integers(len(names))]
        traffic, per_item = models[model]
        batch_size = int(rng.integers(1, 9))
        solo = per_item * (0.5 + 0.5 * batch_size)
        runners = []
        slowdown = 1.0
        for _ in range(int(rng.integers(0, 4))):
            other = names[rng.integers(len(names))]
            overlap = float(rng.uniform(0.05, 1.0))
            runners.append(CoRunner(other, int(rng.integers(1, 9)), {"traffic": models[other][0]}, overlap))
            slowdown += overlap * (0.3 + 0.8 * models[other][0] * traffic)
        latency = solo * slowdown * float(np.exp(rng.normal(0.0, noise)))
        out.append(Record(
            device=f"syn{i % 4}",
            device_kind="SynDevice",
            batch=BatchSpec(model, batch_size, {"traffic": traffic}),
            latency_ms=latency,
            solo_latency_ms=solo,
            co_runners=tuple(runners),
            signals={"busy": sum(r.overlap for r in runners)},
            start_s=i * 0.01,
            source="synthetic",
        ))
    return out
