"""RankPlacements by predictor: what one packed 1,024-candidate ranking costs the handler.

Builds the bench's service (``experiments.bench.bench``'s: 2,000 synthetic warm-up records on 16
devices, the outlier gate on) once per predictor, in this process, and calls the servicer's
``RankPlacements`` directly on the bench's packed requests (``omit_detail``; co-runners given by
overlap or by remaining time, 0-2 per candidate) for ``seconds``, decoding each request and
encoding its response as the server does (its bytes handed to the handler, which reads the classic
candidates from them again; an answer the handler wrote as bytes sent as they are, not parsed and
serialised again). Prints the thread CPU per call (the handler alone: no gRPC, no client),
the candidates per CPU second, the share of it the predictor's answer took (``predict_plan``:
features, predictions and the fixed points of co-runners given by remaining time), and the sha256 of
the answers' bytes (one answer to each request): two revisions of the code that answer alike print the same.

Run: ``.venv/bin/python -m experiments.bench.bench_rank_predictors`` (``--predictors default,rls
--seconds 3``, ``default``: the service's default learner; ``--classic true --candidates 16``: the classic request, with a detailed answer, of 16;
``--detail true``: the packed request with a detailed answer, as the Python client sends it). Against another revision of the code (a ``git archive`` of it extracted to a
folder): ``PYTHONPATH=FOLDER .venv/bin/python experiments/bench/bench_rank_predictors.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from experiments.bench import bench_rpc
from experiments.bench.bench import packed_rank_requests
from experiments.bench.rpc_servers import _build_service
from experiments.common import finish, start
from predictor.predictors import DEFAULT
from predictor.rpc import columns, decoding, wire
from predictor.rpc.protos import pb2
from predictor.rpc.servicer import InterferenceServicer
from predictor.service import answering
from predictor.service.estimates import fixed_point_kernel


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    predictors: tuple[str, ...] = ("default", "rls", "sgd", "ensemble", "tree", "static", "ewma", "solo", "forest")
    candidates: int = 1024
    classic: bool = False  # the classic request (repeated candidates) instead of the packed one
    detail: bool = False  # the packed request asking for every candidate's detail (what the Python client sends)
    seconds: float = 3.0
    warm_records: int = 2000
    seed: int = 0


def measure(spec: str, config: Config, payloads: list[bytes]) -> dict[str, Any]:
    """Thread CPU per packed ranking of ``spec``'s service, the part of it in ``predict_plan``, and the
    sha256 of the answers' bytes (one of each request: two revisions that answer alike print the same)."""
    service = _build_service({"predictor": DEFAULT if spec == "default" else spec, "outlier_gate": True, "warm_records": config.warm_records,
                              "seed": config.seed, "devices": bench_rpc.DEVICES,
                              "max_candidates": config.candidates})
    fixed_point_kernel.warm()
    servicer, messages = InterferenceServicer(service), pb2()
    encode = wire.serializer(messages.RankPlacementsResponse.SerializeToString)  # the server's response serialiser
    predicting = [0.0]
    original = answering.Answering.predict_plan

    def timed_predict_plan(self: Any, *args: Any, **kwargs: Any) -> Any:
        begin = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            predicting[0] += time.thread_time() - begin

    def call(payload: bytes) -> bytes:  # decoded and encoded as the server does: the handler may read the bytes
        request = decoding._decode(messages.RankPlacementsRequest.FromString, payload, "request")  # again,
        return encode(servicer.RankPlacements(request, None))  # and an answer written as bytes is sent as it is

    digest = hashlib.sha256()  # of the answers' bytes: equal in two revisions that answer alike
    for payload in payloads:  # compiled paths and caches warm before the timing
        digest.update(call(payload))
    answering.Answering.predict_plan = timed_predict_plan  # type: ignore[method-assign]
    try:
        calls, begin, cpu = 0, time.perf_counter(), time.thread_time()
        while time.perf_counter() - begin < config.seconds or not calls:
            for payload in payloads:
                call(payload)
                calls += 1
        cpu = time.thread_time() - cpu
    finally:
        answering.Answering.predict_plan = original  # type: ignore[method-assign]
        service.close()
    return {"ms_per_call": 1e3 * cpu / calls, "candidates_per_cpu_s": config.candidates * calls / cpu,
            "predict_plan_share": predicting[0] / cpu, "calls": calls, "answers_sha256": digest.hexdigest()}


def packed_requests(payloads: list[bytes], detail: bool) -> list[bytes]:
    """The requests in the packed form (:func:`~experiments.bench.bench.packed_rank_requests`), or, with
    ``detail``, asking for every candidate's detail as the Python client does."""
    if not detail:
        return packed_rank_requests(payloads)
    messages = pb2()
    return [columns.pack_rank_request(messages.RankPlacementsRequest.FromString(p), omit_detail=False).SerializeToString()
            for p in payloads]


def main() -> None:
    """Measure every predictor; print the table and write the results."""
    config, out = start("bench_rank_predictors", Config(), __doc__.splitlines()[0])
    requests = bench_rpc.build_requests(bench_rpc.Config(candidates=config.candidates, seed=config.seed))
    payloads = requests["RankPlacements"] if config.classic else packed_requests(requests["RankPlacements"], config.detail)
    results = {}
    form = "classic" if config.classic else "packed, with detail" if config.detail else "packed"
    table = Table(title=f"RankPlacements, {config.candidates:,} {form} candidates, handler in-process")
    for column in ("predictor", "CPU ms per call", "candidates per CPU s", "predict_plan's share"):
        table.add_column(column, justify="left" if column == "predictor" else "right")
    for spec in config.predictors:
        results[spec] = found = measure(spec, config, payloads)
        table.add_row(spec, f"{found['ms_per_call']:,.2f}", f"{found['candidates_per_cpu_s']:,.0f}",
                      f"{found['predict_plan_share']:.0%}")
        print(f"{spec}: {found['ms_per_call']:,.2f} ms per call; answers' sha256 {found['answers_sha256'][:16]}")
    Console().print(table)
    finish(out, {"predictors": results})


if __name__ == "__main__":
    main()
