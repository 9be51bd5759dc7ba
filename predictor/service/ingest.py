"""Observed records into the models, the calibrators, the gates and the observation log, by blocks.

:class:`Ingest` learns from domain records only (a :class:`~predictor.records.record.Record`,
a decoded ``coloc/v1`` object, or the :class:`~predictor.records.rules.RecordError` of a record
that could not be converted, which is reported at its place in the stream); the
transport layer converts its messages before they get here, marking each message's end
(:data:`MESSAGE_END`). Each record is checked and logged as it comes; a block of them (a
message, at most ``publish_every_records``) is then replayed against the replay base (its
admission-time questions, answered by the model at the last multiple of
``replay_every_records`` of the sequence) and scored prequentially (predict, bound, then
learn) in stream order under the state's lock, and published once; answers read published
copies (:mod:`predictor.service.published`), so they never see a half-updated model nor wait
for learning. A record is refused when it breaks the magnitude limits, comes faster than its
sender's rate, or is an outlier. ``docs/design.md`` (Ingest by blocks) has the semantics.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pickle
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from predictor.calibration.conformal import BoundSource
from predictor.calibration.shapes import QueryShape
from predictor.predictors.base import LatencyPredictor, restores_in_place
from predictor.predictors.ensemble import EnsemblePredictor
from predictor.prequential import blocks as fastreplay
from predictor.prequential import tree_blocks
from predictor.records import rules
from predictor.records.logio import ReadReport, iter_records
from predictor.records.record import (
    Record,
    RecordError,
    parse_record,
    record_numbers,
    record_within_limits,
)
from predictor.service.admission import Learned
from predictor.service.durability import wal
from predictor.service.durability.dedup import DUPLICATE, TOO_OLD, DedupKey, Duplicate
from predictor.service.errors import (
    InvalidArgument,
    OutlierRejected,
    RateLimited,
    ResourceExhausted,
    ServiceError,
    Unavailable,
)
from predictor.service.estimates.filling import Filling
from predictor.service.guards.ratelimit import RateLimiter
from predictor.service.published import ModelVersion, Publisher
from predictor.service.state import ServiceState
from predictor.service.types import MESSAGE_END, ObservationReport, Rejection

Observed = Record | Mapping[str, Any] | RecordError
"""An item of an observation stream: a record, a decoded ``coloc/v1`` object, or the error of a
record that could not be converted (reported as rejected, never learned)."""


@dataclasses.dataclass(slots=True)
class _Taken:
    """A record logged (and marked taken), waiting to be learned with its block."""

    index: int  # its place in the stream
    record: Record
    kind: str
    batch_id: str
    source: str  # who reported it, for the outlier gate
    seq: int | None = None  # its entry in the observation log (None: not logged)
    client: str = ""  # its sender's identity and how the sender named it: taken once it is written
    key: DedupKey | None = None


class Ingest:
    """The learning path of the service, over its :class:`~predictor.service.state.ServiceState`.

    Records are learned by blocks: each record is validated, rate-limited, logged and marked
    taken in stream order as it arrives; a block (a message, at most
    ``config.publish_every_records`` records) is then replayed at once against the replay base
    (the admission-time questions, :attr:`replay`) and learned
    record by record (prediction, outlier gate, model, calibrators, monitors, in stream order),
    and published once. A block of one record is the per-record path.
    """

    def __init__(self, state: ServiceState):
        self.state = state
        config = state.config
        self.rate_limiter = RateLimiter(config.rate_limit, config.rate_burst) if config.rate_limit > 0 else None
        self.kept = fastreplay.KeptPlans()
        """The compiled learner's row plans, kept from block to block (:meth:`_learn_compiled`)."""
        self.replay: Callable[[Sequence[Record], ModelVersion, Filling],
                              list[list[tuple[QueryShape, float]]]] | None = None
        """Degraded replay: the admission-time answers about each observed batch of a block, asked
        of a model version and filling (the replay base) before the block is learned
        (:func:`~predictor.service.replay_block.replay_block`)."""

    def observe(self, record: Record, batch_id: str = "", *, client: str = "", key: DedupKey | None = None) -> float:
        """Learn from one observed record: score it (prequentially), then update the model.

        Returns the latency predicted for it before learning. With an observation log, the record
        is logged first (:class:`Unavailable` when it cannot be: then it is not learned). Raises
        :class:`OutlierRejected` when the outlier gate refuses it (``client``, else the record's
        source, is who reported it), :class:`~predictor.service.durability.dedup.Duplicate` when ``key``
        names a record of ``client`` already taken in (:mod:`predictor.service.durability.dedup`).
        """
        taken = self._take(0, record, batch_id, client, key)
        outcome = self._learn_block([taken])[0]
        if isinstance(outcome, ServiceError):
            raise outcome
        return outcome

    def _take(self, index: int, record: Record, batch_id: str, client: str, key: DedupKey | None) -> _Taken:
        """Validate ``record`` and log it, marking its key taken: what it needs before its block is
        learned (in stream order). Raises as :meth:`observe` does; a record that raises is not
        logged, and leaves the live view."""
        state = self.state
        if record.latency_ms is None:
            raise InvalidArgument("record.latency_ms", "required in an observation")
        if not rules.name_ok(batch_id, required=False):
            raise InvalidArgument("batch_id", f"longer than {rules.MAX_NAME_LENGTH} characters")
        limit = state.config.max_value
        if not record_within_limits(record, limit):  # the cheap test; the check names the field
            try:
                rules.check_magnitudes(record_numbers(record), limit)
            except RecordError as exc:
                raise InvalidArgument(f"record.{exc.field}", exc.message) from None
        kind = record.device_kind or state.live.kind_of(record.device)
        if kind != record.device_kind:
            record = dataclasses.replace(record, device_kind=kind)
        if key:
            key.validate()
        state.live.touch(record.device, kind)
        try:
            with state.lock:
                if key:
                    self._check_taken(client, key)
                seq = None
                if state.obs_log is not None and state.obs_log.is_open:
                    try:
                        seq = state.obs_log.append(record, client, batch_id, key)
                    except wal.LogError as exc:
                        raise Unavailable(f"observation not logged, so not learned: {exc}") from None
                if key:
                    state.dedup.reserve(client, key)  # taken once written (_write_block)
                if seq is not None:
                    state.unlearned.add(seq)
        except BaseException:
            if batch_id:
                state.live.end(record.device, batch_id, required=False)
            raise
        return _Taken(index, record, kind, batch_id, client or record.source, seq, client, key)

    def _write_block(self, block: list[_Taken]) -> None:
        """Write the block's log entries (one ``write``: group commit) and take their keys, under the
        lock before the block is learned; raises :class:`Unavailable` when they could not be written:
        then none of them is learned nor taken (sending them again is safe)."""
        state = self.state
        seqs = [taken.seq for taken in block if taken.seq is not None]
        try:
            if seqs:
                state.obs_log.write_through(seqs)  # type: ignore[union-attr]
        except BaseException as exc:
            state.unlearned.difference_update(seqs)
            for taken in block:
                if taken.key:
                    state.dedup.release(taken.client, taken.key)
            if isinstance(exc, wal.LogError):
                raise Unavailable(f"observation not logged, so not learned: {exc}") from None
            raise
        for taken in block:
            if taken.key:
                state.dedup.take(taken.client, taken.key)

    def _learn_block(self, block: list[_Taken]) -> list[float | ServiceError]:
        """Learn a block of records already logged: each one's prediction before learning, or the
        :class:`OutlierRejected` that refused it, in block order.

        The block is cut where the sequence crosses a replay boundary (every
        ``config.replay_every_records`` records that reached the learner; with the replay off too:
        a record the gate refuses has its part learned again without it, so the parts bound what an
        outlier costs); per part, the admission-time questions of every record are replayed against
        the replay base
        (:meth:`ServiceState.replay_base <predictor.service.state.ServiceState.replay_base>`), then
        each record is learned in order (its own prediction is prequential); the learned records
        are then calibrated on with their replayed answers, in order, at once for the whole block
        (nothing the parts compute reads the admission calibration). Published once, at the end.
        What is learned is the same however the records are cut into blocks (``docs/design.md``,
        One truth).
        """
        state = self.state
        out: list[float | ServiceError] = []
        try:
            # a block of many: GetStatus answers from its start meanwhile (a status is too dear to take per record)
            with state.learning_block() if len(block) > 1 else state.lock:
                self._write_block(block)
                every = state.config.replay_every_records
                start = 0
                calibrating: list[Learned] = []  # calibrated on once, after the parts (nothing between reads it)
                try:
                    while start < len(block):
                        part = block[start:start + every - state.sequence % every]
                        start += len(part)
                        replays = self._replays(part)
                        known = [state.predictor.learned_key(taken.record) for taken in part]
                        outcomes = self._learn_records(part)
                        state.sequence += len(part)
                        out += outcomes
                        calibrating += [
                            (taken.record, taken.kind, math.nan if guess else outcome, replayed, taken.batch_id)
                            for taken, replayed, outcome, guess in zip(part, replays, outcomes,
                                                                       self._guesses(part, outcomes, known), strict=True)
                            if not isinstance(outcome, ServiceError)]
                finally:
                    if calibrating:
                        state.admission.observe_block(calibrating)
                learned = sum(not isinstance(outcome, ServiceError) for outcome in out)
                if learned:
                    state.changed(learned)
                # learned or refused by the gate: in the state a snapshot saves (when learning raises,
                # they stay unlearned, so the log keeps them for the next start)
                state.unlearned.difference_update([taken.seq for taken in block if taken.seq is not None])
        finally:
            for taken in block:
                if taken.batch_id:
                    state.live.end(taken.record.device, taken.batch_id, required=False)
        return out

    def _replays(self, part: list[_Taken]) -> list[list[tuple[QueryShape, float]]]:
        """The admission-time answers about each record of ``part`` (records between two replay
        boundaries), from the replay base (under the lock); none about a record whose answers the base
        could only guess (no solo latency given or profiled, its model and batch size never learned):
        a guess's residual says nothing of how a learned answer errs, so it calibrates nothing."""
        if self.replay is None:
            return [[] for _ in part]
        state = self.state
        if state.sequence % state.config.replay_every_records == 0 and len(part) == state.config.replay_every_records:
            # a part from a replay boundary to the next: its base is the model and filling as they stand,
            # and nothing after this part reads it (the next part takes the next base): no copy
            predictor, filling, sequence = state.predictor, state.filling, state.sequence
        else:
            base = state.replay_base()
            predictor, filling, sequence = base.predictor, base.filling, base.sequence
        version = Publisher.live(state.generation, predictor, state.calibrator, state.admission.calibrator, sequence)
        records = [t.record for t in part]
        answers = self.replay(records, version, filling)
        return [answer if predictor.knows_key(record) else []
                for record, answer in zip(records, answers, strict=True)]

    def _guesses(self, part: list[_Taken], outcomes: list[float | ServiceError], known: list[bool]) -> list[bool]:
        """Per record of ``part``, just learned with ``outcomes``: whether its own prediction was a guess
        (no solo latency given, its model and batch size not learned before it:
        :meth:`~predictor.predictors.base.LatencyPredictor.knows_key`), from ``known``, whether each
        one's key was learned before the part (``learned_key``): a key learned in the part was learned
        at its first record learned, if it is learned now (the profile only ever adds keys)."""
        predictor = self.state.predictor
        added: set[tuple[str, int]] = set()
        out = []
        for taken, outcome, learned_before in zip(part, outcomes, known, strict=True):
            record = taken.record
            key = (record.batch.model, record.batch.batch_size)
            out.append(record.solo_latency_ms is None and not learned_before and key not in added)
            if not isinstance(outcome, ServiceError) and predictor.learned_key(record):
                added.add(key)
        return out

    def _check_taken(self, client: str, key: DedupKey) -> None:
        """Raise when ``key`` names a record already taken in, or one too old to tell (under the lock)."""
        dedup = self.state.dedup
        verdict = dedup.verdict(client, key)  # a key in flight (logged, its block being learned): a duplicate
        if verdict == DUPLICATE:
            dedup.n_duplicates += 1
            raise Duplicate("already learned (a resent record): dropped", "record")
        if verdict == TOO_OLD:
            dedup.n_too_old += 1
            raise InvalidArgument(
                "sequence",
                f"{key.sequence} is more than {dedup.window} below the highest sequence number taken "
                f"from producer {key.producer!r}: cannot tell whether it was learned, so it is not",
            )

    def _learn(self, record: Record, kind: str, source: str) -> float:
        """One prequential step, under the lock, of a record already logged.

        The prediction is made before the model learns the record, and the bound from the
        residuals before this one. An outlier is neither learned, nor calibrated, nor scored.
        """
        state = self.state
        actual = record.latency_ms
        assert actual is not None
        predictor = state.predictor
        if state.gates is None or not predictor.knows_solo(record):
            # Without a solo latency to stand on, the prediction is a guess: nothing to gate against.
            predicted = predictor.predict_learn_one(record)
        else:
            predicted = predictor.predict_one(record)
            reason = state.gates.check(kind, predicted, actual, source)
            if reason is not None:
                self._count_refusal()
                raise OutlierRejected(reason)
            predictor.learn_one(record)
        self._score(record, kind, predicted)
        return predicted

    def _count_refusal(self) -> None:
        """Count a record the outlier gate refused (the gate's own state moved)."""
        self.state.changes += 1
        self.state.n_outliers += 1

    def _score(self, record: Record, kind: str, predicted: float) -> None:
        """After the model learned ``record`` (predicted ``predicted`` before): filling, the
        conformal calibrator (bound from the residuals before this one) and the error monitor."""
        state = self.state
        actual = record.latency_ms
        assert actual is not None
        state.filling.observe(record, kind)
        bound = state.calibrator.upper_bound(predicted, kind, state.config.coverage_confidence)
        state.calibrator.add(kind, actual, predicted)
        state.monitor.update(
            kind,
            actual=actual,
            predicted=predicted,
            covered=actual <= bound.upper_ms,
            calibrated=bound.source is not BoundSource.FALLBACK,
        )
        state.changes += 1

    def _learn_records(self, block: list[_Taken]) -> list[float | ServiceError]:
        """:meth:`_learn` of each record of ``block`` in order: its prediction, or the
        :class:`OutlierRejected` that refused it. Compiled where it applies (:meth:`_learn_compiled`),
        else record by record."""
        learned = self._learn_compiled(block)
        if learned is not None:
            return learned
        out: list[float | ServiceError] = []
        for taken in block:
            try:
                out.append(self._learn(taken.record, taken.kind, taken.source))
            except OutlierRejected as exc:
                out.append(exc)
        return out

    def _learn_compiled(self, block: list[_Taken]) -> list[float | ServiceError] | None:
        """The prequential steps of ``block`` by the compiled RLS or SGD kernel
        (:func:`~predictor.prequential.blocks.prequential_blocks`: the same steps as :meth:`_learn`, equal
        within rounding): each record's prediction, or the :class:`OutlierRejected` that refused it.
        ``None`` where it does not apply (not such an ``rls`` or ``sgd``). A single record goes this way
        too, so that every record is learned by the same arithmetic whatever block it is in.

        An ``ensemble`` whose experts all go this way goes this way too: each expert over the block by
        its kernel, then the weights stepped record by record (the experts learn apart from the weights,
        so each one's predictions are those the ensemble's own step would get).

        The kernel learns the records the gate has not refused, then the gate checks their predictions in
        order. Where it refuses one more, model and gates are restored and the block is learned again
        without it, so that nothing after a refused record learned it; a record refused before is checked
        again at its place with the prediction it was refused on (the same records before it, so the
        same state, prediction and refusal). Refusals come in block order, so a block with ``k`` of them
        is learned ``k + 1`` times at most.
        """
        state = self.state
        predictor = state.predictor
        if not block or not _compiles(predictor):
            return None
        gates = state.gates
        refused: dict[int, tuple[float, bool]] = {}  # place in the block -> the prediction it was refused on, known
        kinds = {t.kind for t in block}
        while True:
            # what a refusal of the gate restores (no gate: nothing is refused, nothing to keep)
            restore, release = (None, _nothing) if gates is None else _restore_point(state, kinds)
            try:  # the restore point let go however this ends (restored, not needed, or learning raised)
                learning = [t.record for at, t in enumerate(block) if at not in refused]
                knows: list[bool] = []
                predicted = _prequential_compiled(predictor, learning, knows, self.kept) if learning else []
                steps = iter(zip(predicted, knows, strict=True))
                out: list[float | ServiceError] = []
                again = False
                for at, taken in enumerate(block):
                    value, known = refused[at] if at in refused else next(steps)
                    reason = None if gates is None or not known else gates.check(
                        taken.kind, value, taken.record.latency_ms, taken.source)
                    if reason is None:
                        if at in refused:  # the same state and prediction that it refused: never so
                            raise RuntimeError(f"the outlier gate admitted, checked again, the record it refused "
                                               f"at place {at} of a block")
                        out.append(value)
                    elif at in refused:
                        out.append(OutlierRejected(reason))
                    else:
                        refused[at] = (value, known)
                        restore()  # type: ignore[misc]
                        self.kept.forget()
                        again = True
                        break
            finally:
                release()
            if not again:
                break
        for taken, outcome in zip(block, out, strict=True):
            if isinstance(outcome, OutlierRejected):
                self._count_refusal()
            else:
                self._score(taken.record, taken.kind, outcome)
        return out

    def report_observations(
        self,
        items: Iterable[tuple[Observed, str] | tuple[Observed, str, DedupKey | None]],
        *,
        client: str = "",
        peer: str = "",
    ) -> ObservationReport:
        """Learn from a stream of ``(record, batch_id)`` or ``(record, batch_id, key)`` (see :data:`Observed`).

        A record whose ``key`` names one already taken in is dropped and counted in
        ``duplicates`` (neither accepted nor rejected; see :mod:`predictor.service.durability.dedup`).

        Records are learned by blocks (see the class), at most ``config.publish_every_records``
        long; a :data:`MESSAGE_END` item ends a block early (the transport marks its messages so).

        A bad record is rejected with the path of its field (``record.<field>``), the rest learned;
        so are records refused by the outlier gate or beyond the caller's rate. ``client`` is the
        caller's authenticated identity ("" when none), ``peer`` its address. The answer comes
        once the learned records are in the observation log (synced per the fsync policy).
        """
        state = self.state
        state.require_ready()
        with state.learning():
            report = self._report(items, client, peer)
        state.publish()  # what is acknowledged is in the answers that follow
        if state.obs_log is not None and state.obs_log.is_open:
            report.log_sequence = state.obs_log.last_seq
            try:
                state.obs_log.sync(report.log_sequence)  # the answer is the acknowledgement
            except wal.LogError as exc:
                raise Unavailable(f"observations learned but not synced to the log: {exc}") from None
        return report

    def _report(
        self,
        items: Iterable[tuple[Observed, str] | tuple[Observed, str, DedupKey | None]],
        client: str,
        peer: str,
    ) -> ObservationReport:
        """The records of a stream into the model, each accepted or rejected (see :meth:`report_observations`).

        Each record is checked, rate-limited and logged as it comes; they are learned by blocks of
        at most ``config.publish_every_records`` (:meth:`_learn_block`), and whatever was logged
        is learned before the stream's answer, or its error, goes back.
        """
        state = self.state
        report = ObservationReport()
        limit = state.config.max_stream_records
        size = max(1, state.config.publish_every_records)
        block: list[_Taken] = []
        index = -1
        try:
            for entry in items:
                if entry is MESSAGE_END:
                    self._learn_into(report, block)
                    continue
                item, batch_id, *named = entry
                index += 1
                if index >= limit:
                    raise ResourceExhausted(
                        "records", f"a stream may carry at most {limit} records; the first {limit} were processed"
                    )
                try:
                    if isinstance(item, RecordError):  # not converted: nothing of it goes further
                        raise item
                    record = item if isinstance(item, Record) else parse_record(item)
                    key = named[0] if named else None
                    if key:
                        key.validate()
                        with state.lock:  # a resent record costs no rate-limit token
                            self._check_taken(client, key)
                    self._rate_limit(record, client, peer)
                    block.append(self._take(index, record, batch_id, client, key))
                except Duplicate:
                    report.duplicates += 1
                except (RecordError, RateLimited, InvalidArgument) as exc:
                    self._refuse(report, index, exc)
                if len(block) >= size:
                    self._learn_into(report, block)
        finally:
            self._learn_into(report, block)  # logged: learned, even when the stream fails after it
        report.observations_learned = state.predictor.n_learned
        return report

    def _learn_into(self, report: ObservationReport, block: list[_Taken]) -> None:
        """Learn ``block`` (emptied), counting each record accepted or rejected in ``report``."""
        if not block:
            return
        learning = list(block)
        block.clear()  # learned once, even if learning fails
        for taken, outcome in zip(learning, self._learn_block(learning), strict=True):
            if isinstance(outcome, ServiceError):
                self._refuse(report, taken.index, outcome)
            else:
                report.accepted += 1

    def _refuse(self, report: ObservationReport, index: int, exc: Exception) -> None:
        """Count a refused record in ``report``, named by its place and field."""
        if isinstance(exc, RecordError):
            self._reject(report, Rejection(index, f"record.{exc.field}", exc.message))
            return
        if isinstance(exc, RateLimited):
            report.rate_limited += 1
        elif isinstance(exc, OutlierRejected):
            report.outliers += 1
        assert isinstance(exc, ServiceError)
        self._reject(report, Rejection(index, exc.field, exc.message))

    def warm_start(self, path: str | Path, *, tolerant: bool = True) -> ReadReport:
        """Learn from a ``coloc/v1`` log, prequentially, as if it had been streamed (by blocks,
        :meth:`learn_stream`). A record the service refuses stops it (the records before it learned),
        but for the outlier gate's refusals (counted in ``n_outliers``)."""
        report = ReadReport()

        def refused(index: int, error: ServiceError) -> None:
            if not isinstance(error, OutlierRejected):
                raise error

        self.learn_stream(((record, "") for record in iter_records(path, tolerant=tolerant, report=report)), refused)
        return report

    def learn_stream(self, items: Iterable[tuple[Record, str]], refused: Callable[[int, ServiceError], None]) -> None:
        """Learn ``(record, client)`` pairs in order, each as :meth:`observe` learns it (``client``: who
        reported it; no batch, no key), by blocks of ``config.publish_every_records`` as
        :meth:`report_observations` learns a stream: the same state as one :meth:`observe` each (``docs/design.md``,
        One truth), at a block's cost. ``refused(index, error)`` is told of each record refused, in
        order (by its validation or the outlier gate); what it raises stops the stream, once the
        records taken before are learned. For a warm start and the observation log's replay."""
        size = max(1, self.state.config.publish_every_records)
        block: list[_Taken] = []

        def learn() -> None:
            taken, block[:] = list(block), []
            for each, outcome in zip(taken, self._learn_block(taken), strict=True):
                if isinstance(outcome, ServiceError):
                    refused(each.index, outcome)

        try:
            for index, (record, client) in enumerate(items):
                try:
                    block.append(self._take(index, record, "", client, None))
                except ServiceError as exc:
                    refused(index, exc)
                if len(block) >= size:
                    learn()
        finally:
            if block:
                learn()

    def _rate_limit(self, record: Record, client: str, peer: str = "") -> None:
        """Take a token of the sender's bucket: its authenticated identity whenever it has one (a
        record's ``source`` is only a label then), else its peer address or the record's source."""
        limiter = self.rate_limiter
        if limiter is None:
            return
        if client:
            key = client
        elif self.state.config.rate_limit_by == "client" and peer:
            key = f"peer:{peer}"
        else:
            key = f"source:{record.source}"
        if not limiter.allow(key):
            with self.state.lock:
                self.state.n_rate_limited += 1
            raise RateLimited(
                f"{key} sends more than {limiter.rate:g} observations/s (burst {limiter.burst}); "
                "not learned, send it again later"
            )

    def _reject(self, report: ObservationReport, rejection: Rejection) -> None:
        report.rejected += 1
        with self.state.lock:
            self.state.n_rejected += 1
        if len(report.rejections) < self.state.config.max_rejections_reported:
            report.rejections.append(rejection)


def _compiles(predictor: LatencyPredictor) -> bool:
    """Whether :meth:`Ingest._learn_compiled` learns ``predictor``: an ``rls`` or ``sgd`` the compiled
    kernels take (:func:`~predictor.prequential.blocks.supports`), or an ``ensemble`` of such experts."""
    if isinstance(predictor, EnsemblePredictor):
        return all(fastreplay.supports(expert) for expert in predictor.expert_predictors)
    return fastreplay.supports(predictor)


def _prequential_compiled(predictor: LatencyPredictor, records: list[Record], knows: list[bool],
                          kept: fastreplay.KeptPlans) -> list[float]:
    """Each record's prediction before ``predictor`` (see :func:`_compiles`) learned it, learning them all;
    ``knows`` gets whether each one's solo latency was known just before it was learned; ``kept``: the
    row plans kept from call to call."""
    if isinstance(predictor, EnsemblePredictor):
        return tree_blocks.prequential_tree_blocks(predictor, records, knows=knows, kept=kept).predicted
    return fastreplay.prequential_blocks(predictor, records, block=len(records), knows=knows, kept=kept).predicted


def _restore_point(state: ServiceState, kinds: set[str]) -> tuple[Callable[[], None], Callable[[], None]]:
    """What brings the state's predictor and outlier gates back to where they are now (a refusal
    of the gate undoes the learning since; only the gates of ``kinds`` may check meanwhile), and what
    lets it go where it is not needed: their own restore points where they have them (the arrays
    learning changes in place, copied; the gates' changes noted), else a pickle of both."""
    predictor, gates = state.predictor, state.gates
    if restores_in_place(predictor) and gates is not None:
        learned, checked = predictor.restore_point(), gates.restore_point(kinds)  # type: ignore[attr-defined]

        def restore() -> None:
            predictor.restore(learned)  # type: ignore[attr-defined]
            gates.restore(checked)

        return restore, functools.partial(gates.release, checked)
    saved = pickle.dumps((predictor, gates), protocol=pickle.HIGHEST_PROTOCOL)

    def unpickle() -> None:
        state.predictor, state.gates = pickle.loads(saved)

    return unpickle, _nothing


def _nothing() -> None:
    """Nothing to let go of (a pickle)."""
