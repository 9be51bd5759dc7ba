"""Sequential gRPC unary clients that cost little CPU: one ``h2load`` process per client.

The benchmarks' Python clients (:class:`experiments.bench.rpc_load.ClientPool`) spend about a quarter of
a millisecond of CPU per call in grpcio. On a machine of two cores those clients take CPU from the
server they measure, so a server that scales with its cores shows little of it. ``h2load``
(nghttp2's HTTP/2 load generator, Debian package ``nghttp2-client``) speaks the same HTTP/2 that
gRPC runs on, in C: each client here is one ``h2load`` process with one connection and one call at a
time (``-c 1 -m 1``), sending one pre-serialised request in gRPC's message framing (a zero byte,
the length in 4 bytes big-endian, the message), for a fixed duration.

``h2load`` counts an HTTP status of 200 as a success, and gRPC answers an error with 200 too (the
status in the trailers), so :func:`run` also reports the bytes of answer data per call: an error
carries no message, so a run whose answers are as long as the real answer's framed message
answered every call (see :func:`run`'s ``answer_bytes``).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

H2LOAD = "h2load"


def available() -> bool:
    """Whether ``h2load`` is on the PATH."""
    return shutil.which(H2LOAD) is not None


def grpc_frame(message: bytes) -> bytes:
    """``message`` as one gRPC length-prefixed message (not compressed)."""
    return b"\0" + struct.pack(">I", len(message)) + message


def _parse(output: str) -> dict:
    """Calls, errors, seconds and answer data bytes from ``h2load``'s summary."""
    value, unit = re.search(r"finished in ([\d.]+)(us|ms|s)\b", output).groups()  # h2load: "1.00s", "999.95ms"
    seconds = float(value) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
    counts = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded", output)
    data = re.search(r"\((\d+)\) data", output)
    done, succeeded = int(counts.group(2)), int(counts.group(3))
    return {"calls": succeeded, "errors": done - succeeded, "elapsed": seconds, "data_bytes": int(data.group(1))}


def _latencies(log: Path) -> np.ndarray:
    """Each logged call's duration (s), from ``h2load``'s log (start µs, status, duration µs per line)."""
    rows = [line.split("\t") for line in log.read_text().splitlines() if line.strip()]
    return np.array([int(row[2]) / 1e6 for row in rows], dtype=float)


def run(target: str, path: str, requests: Sequence[bytes], clients: int, duration_s: float,
        answer_bytes: Sequence[int] | None = None, rps: float = 0.0) -> list[dict]:
    """Run ``clients`` sequential clients at once on ``target`` for ``duration_s`` seconds (a balanced
    target of several addresses, ``ipv4:HOST:P1,HOST:P2``: client ``i`` on its ``i``-th address, round robin).

    Client ``i`` sends ``requests[i % len(requests)]`` to the method ``path`` back to back, or,
    with ``rps``, at most ``rps`` calls a second (``h2load --rps``: still one at a time, so a
    call that waits delays the next; a call's latency is counted from when it was sent).

    Parameters
    ----------
    answer_bytes
        The length of the real answer's message to each request: a client whose answers average
        more than a byte fewer (so some were gRPC errors, which carry none) makes the run fail.

    Returns
    -------
    list of dict
        Per client: ``calls`` (answered), ``errors``, ``elapsed`` (s), ``cpu_s`` (the ``h2load``
        process's user + system CPU), ``warmup_calls`` (0: none outside the measurement) and
        ``latency``: each call's time from sending to the end of its answer (s, ``h2load``'s
        ``--log-file``, microsecond resolution).
    """
    if not available():
        raise RuntimeError(f"{H2LOAD} is not installed (Debian: apt-get install nghttp2-client)")
    # a balanced target (ipv4:HOST:P1,HOST:P2: every worker's own port): the clients spread over its addresses
    addresses = target.split(":", 1)[1].split(",") if target.startswith(("ipv4:", "ipv6:")) else [target]
    with tempfile.TemporaryDirectory(prefix="h2load-") as folder:
        processes = []
        for i in range(clients):
            url = f"http://{addresses[i % len(addresses)]}{path}"
            body = Path(folder, f"request-{i}.bin")
            body.write_bytes(grpc_frame(requests[i % len(requests)]))
            command = [H2LOAD, "-c", "1", "-m", "1", "-D", f"{max(1, round(duration_s))}", "-d", str(body),
                       "--log-file", str(Path(folder, f"log-{i}.tsv")), *(["--rps", f"{rps:g}"] if rps else []),
                       "-H", "content-type: application/grpc", "-H", "te: trailers", url]
            processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        results = []
        for i, process in enumerate(processes):
            output = process.stdout.read()
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            if process.returncode != 0 or "finished in" not in output:
                raise RuntimeError(f"{H2LOAD} failed ({process.returncode}):\n{output[-2000:]}")
            result = _parse(output) | {"cpu_s": usage.ru_utime + usage.ru_stime, "warmup_calls": 0,
                                       "latency": _latencies(Path(folder, f"log-{i}.tsv"))}
            expected = None if answer_bytes is None else len(grpc_frame(b"")) + answer_bytes[i % len(requests)] - 1
            if expected is not None and result["data_bytes"] < result["calls"] * expected:
                raise RuntimeError(f"{H2LOAD}: {result['data_bytes']} bytes of answers for {result['calls']} calls, "
                                   f"fewer than the real answers' ({expected + 1} bytes each): some were errors")
            results.append(result)
    return results
