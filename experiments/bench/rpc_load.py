"""Load generation for the RPC benchmark: client processes that drive a server over a real channel.

A :class:`ClientPool` holds ``n`` spawned client processes, each with its own
channel (its own HTTP/2 connection) per target. Requests are pre-serialised
bytes and answers are left undecoded, so the clients spend as little of the
shared CPU as possible and exactly the same on the service and on its echo.

Tasks, sent to every client at once and started at a common wall-clock time (the unary ones after
``warmup`` calls, default :data:`WARMUP_CALLS`):

* ``open``: an open-loop schedule at ``rate`` calls/s per client (clients
  staggered), each call blocking; latency is taken from the actual send and,
  corrected for coordinated omission, from the scheduled send;
* ``open_async``: the open loop from one ``grpc.aio`` process, each call sent at its scheduled
  time whatever became of the earlier ones, with each call's status code (``codes``; 0: OK);
* ``closed``: calls back to back for ``duration_s`` (also of a client-streaming method: one
  message per call, so each call waits for its acknowledgement);
* ``stream``: one client-streaming call carrying all ``messages``.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from collections.abc import Sequence
from typing import Any

import grpc
import numpy as np

from predictor.rpc.security import open_channel

WARMUP_CALLS = 50


def _channel(channels: dict[str, Any], target: str) -> Any:
    channel = channels.get(target)
    if channel is None:
        channel = channels[target] = open_channel(target)  # a target of several addresses: round robin
        grpc.channel_ready_future(channel).result(timeout=30)
    return channel


def _wait_until(perf_deadline: float) -> None:
    while True:
        left = perf_deadline - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left if left > 0.002 else left * 0.5 if left > 0.0002 else 0)


def _perf_at(wall_time: float) -> float:
    """The ``perf_counter`` reading at wall-clock ``wall_time`` (shared between processes)."""
    return time.perf_counter() + (wall_time - time.time())


def _open(call: Any, task: dict) -> dict:
    requests: Sequence[bytes] = task["requests"]
    rate, n = task["rate"], int(task["rate"] * task["duration_s"])
    start = _perf_at(task["start_at"]) + task.get("offset_s", 0.0)
    sent = np.empty(n)
    latency = np.empty(n)
    corrected = np.empty(n)
    errors = 0
    for i in range(n):
        scheduled = start + i / rate
        _wait_until(scheduled)
        t0 = time.perf_counter()
        try:
            call(requests[i % len(requests)])
        except Exception:  # noqa: BLE001 - counted; the benchmark reports errors
            errors += 1
        t1 = time.perf_counter()
        sent[i], latency[i], corrected[i] = t0 - start, t1 - t0, t1 - scheduled
    return {"latency": latency, "corrected": corrected, "elapsed": time.perf_counter() - start, "calls": n,
            "errors": errors}


async def _warm_up_call(call: Any, request: bytes, refusals_allowed: int = 100) -> None:
    """One warm-up call, retried while refused (``RESOURCE_EXHAUSTED``): a server measured just after an
    open loop beyond its capacity may still refuse for a moment."""
    for _ in range(refusals_allowed):
        try:
            await call(request)
            return
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            await asyncio.sleep(0.05)
    await call(request)


def _open_async(task: dict) -> dict:
    """The open loop from one process with ``grpc.aio``: each call is sent at its scheduled time
    whether or not earlier ones have answered (so concurrency is whatever the latency makes it)."""

    async def run() -> dict:
        requests: Sequence[bytes] = task["requests"]
        rate, n = task["rate"], int(task["rate"] * task["duration_s"])
        latency = np.empty(n)
        corrected = np.empty(n)
        codes = np.zeros(n, dtype=np.int64)  # each call's status: grpc.StatusCode's number (0: OK)
        errors = 0
        async with grpc.aio.insecure_channel(task["target"]) as channel:
            call = channel.unary_unary(task["path"])
            for i in range(min(WARMUP_CALLS, 5 * len(requests))):
                await _warm_up_call(call, requests[i % len(requests)])
            start = _perf_at(task["start_at"])

            async def one(i: int, scheduled: float) -> None:
                nonlocal errors
                t0 = time.perf_counter()
                try:
                    await call(requests[i % len(requests)], timeout=task.get("timeout_s"))
                except grpc.RpcError as error:
                    errors += 1
                    codes[i] = error.code().value[0]
                t1 = time.perf_counter()
                latency[i], corrected[i] = t1 - t0, t1 - scheduled

            tasks = []
            for i in range(n):
                scheduled = start + i / rate
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(one(i, scheduled)))
            await asyncio.gather(*tasks)
            elapsed = time.perf_counter() - start
        return {"latency": latency, "corrected": corrected, "elapsed": elapsed, "calls": n, "errors": errors,
                "codes": codes}

    return asyncio.run(run())


def _closed(call: Any, task: dict) -> dict:
    requests: Sequence[bytes] = task["requests"]
    start = _perf_at(task["start_at"])
    _wait_until(start)
    end = start + task["duration_s"]
    latencies = []
    errors = 0
    first_error = None
    i = 0
    now = start
    cpu0 = time.process_time()  # this client process's CPU (every thread: gRPC's own included)
    while now < end:
        try:
            call(requests[i % len(requests)])
        except Exception as exc:  # noqa: BLE001
            errors += 1
            first_error = first_error or f"{type(exc).__name__}: {exc}"
        t1 = time.perf_counter()
        latencies.append(t1 - now)
        now = t1
        i += 1
    return {"latency": np.array(latencies), "elapsed": now - start, "calls": i, "errors": errors,
            "first_error": first_error, "cpu_s": time.process_time() - cpu0}


def _stream(channel: Any, task: dict) -> dict:
    call = channel.stream_unary(task["path"])
    start = _perf_at(task["start_at"])
    _wait_until(start)
    response = call(iter(task["messages"]), timeout=task.get("timeout_s", 600.0))
    return {"elapsed": time.perf_counter() - start, "response": response, "calls": 1, "errors": 0}


def client_main(conn: Any) -> None:
    """A client process: for each task received on ``conn``, connect and warm up, say ``ready``,
    receive the common start time, run the task and send back its result; ``None`` stops."""
    channels: dict[str, Any] = {}
    while True:
        task = conn.recv()
        if task is None:
            break
        try:
            if task["kind"] == "open_async":
                conn.send("ready")
                task["start_at"] = conn.recv()
                conn.send(_open_async(task))
                continue
            channel = _channel(channels, task["target"])
            call = None
            warmup = 0
            if task["kind"] != "stream":
                call = channel.unary_unary(task["path"])
                warmup = min(task.get("warmup", WARMUP_CALLS), 5 * len(task["requests"]))
                for i in range(warmup):
                    call(task["requests"][i % len(task["requests"])])
            conn.send("ready")
            task["start_at"] = conn.recv()
            if call is None:
                result = _stream(channel, task)
            else:
                result = (_open if task["kind"] == "open" else _closed)(call, task) | {"warmup_calls": warmup}
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            result = {"failed": f"{type(exc).__name__}: {exc}"}
        conn.send(result)
    for channel in channels.values():
        channel.close()


class ClientPool:
    """``n`` client processes, started once and reused for every measurement."""

    def __init__(self, n: int):
        context = mp.get_context("spawn")
        self._conns = []
        self._processes = []
        for _ in range(n):
            parent, child = context.Pipe()
            process = context.Process(target=client_main, args=(child,), daemon=True)
            process.start()
            self._conns.append(parent)
            self._processes.append(process)

    def __len__(self) -> int:
        return len(self._conns)

    def run(self, tasks: Sequence[dict], lead_s: float = 0.05) -> list[dict]:
        """Run one task per client (the first ``len(tasks)`` clients), all starting together."""
        conns = self._conns[: len(tasks)]
        for conn, task in zip(conns, tasks, strict=True):
            conn.send(task)
        answers = [conn.recv() for conn in conns]
        failed = [a for a in answers if a != "ready"]
        start_at = time.time() + lead_s
        ready = [conn for conn, answer in zip(conns, answers, strict=True) if answer == "ready"]
        for conn in ready:
            conn.send(start_at)
        results = [conn.recv() for conn in ready]
        failed += [r for r in results if "failed" in r]
        if failed:
            raise RuntimeError(f"a client failed: {failed[0]}")
        return results

    def close(self) -> None:
        """Tell every client to stop and wait up to 10 s for each."""
        for conn in self._conns:
            conn.send(None)
        for process in self._processes:
            process.join(timeout=10)
