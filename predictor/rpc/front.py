"""The admission front: gRPC calls taken in by a C++ process, so that overload is refused at once.

A Python gRPC server takes every call in on one polling thread that needs the GIL; while the
answer threads hold it, arriving calls wait in gRPC's core before any of our code sees them, and a
call refused under overload is refused late. ``predictor serve --front`` puts
``build/admission_front`` (``front/admission_front.cc``, built by ``make front`` against Debian's
``libgrpc++-dev``) before the Python server: it listens on the public address, forwards every call
(unary or streaming, with its metadata, deadline and status) to the Python server (``predictor serve``
binds it to a Unix socket in a folder only its own user may enter),
and refuses an answer (:data:`~predictor.rpc.security.READ_METHODS`) with ``RESOURCE_EXHAUSTED``
before reading it when ``limit`` answers are already in flight behind it. Its threads need no GIL.

The caller's own address travels as ``x-predictor-peer`` metadata
(:data:`~predictor.rpc.security.FRONT_PEER_KEY`); a server started behind the front
(:class:`~predictor.rpc.security.AuthPolicy` ``behind_front``) checks that address, not the front's
(writes from other machines without a credential stay refused).

Examples
--------
>>> front = Front("127.0.0.1:0", "127.0.0.1:50051", limit=4, binary=Path("/nonexistent"))
>>> front.command()[:3]
['/nonexistent', '--listen', '127.0.0.1:0']
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

from predictor.rpc.names import method_path
from predictor.rpc.security import READ_METHODS

BINARY_ENV = "PREDICTOR_FRONT"
"""The environment variable that names the front's executable, where it is not ``build/admission_front``."""

_BUILT = Path(__file__).resolve().parents[2] / "build" / "admission_front"


def front_binary() -> Path | None:
    """The front's executable: ``$PREDICTOR_FRONT``, else the source checkout's ``build/admission_front``,
    else ``admission_front`` on the ``PATH``; ``None`` when none exists."""
    named = os.environ.get(BINARY_ENV)
    if named:
        return Path(named) if Path(named).is_file() else None
    if _BUILT.is_file():
        return _BUILT
    found = shutil.which("admission_front")
    return Path(found) if found else None


class Front:
    """One admission front process: ``listen`` (``host:port``, port 0: any) forwarding to ``backend``,
    at most ``limit`` answers in flight behind it. :meth:`start` returns the port it listens on."""

    def __init__(self, listen: str, backend: str, *, limit: int, binary: Path | None = None):
        if limit < 1:
            raise ValueError(f"--front-limit must be >= 1, got {limit}")
        self.listen, self.backend, self.limit = listen, backend, limit
        self.binary = binary if binary is not None else front_binary()
        self.process: subprocess.Popen | None = None
        self.port = 0

    def command(self) -> list[str]:
        """The front's command line."""
        limited = [arg for name in sorted(READ_METHODS) for arg in ("--limited", method_path(name))]
        return [str(self.binary), "--listen", self.listen, "--backend", self.backend, "--limit", str(self.limit),
                *limited]

    def start(self, timeout_s: float = 10.0) -> int:
        """Start the front and wait until it listens; its port (``OSError`` naming the address, or the
        missing executable, when it cannot)."""
        if self.binary is None or not self.binary.is_file():
            raise OSError("--front: the admission front is not built (run `make front`: it needs g++ and "
                          f"Debian's libgrpc++-dev), or set ${BINARY_ENV} to its executable")
        self.process = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        line = first[0] if first else ""
        if not line.startswith("listening on "):
            self.stop()
            error = self.process.stderr.read().strip() if self.process.stderr else ""
            raise OSError(error or f"the admission front did not start listening on {self.listen} in {timeout_s:g} s")
        self.port = int(line.split()[-1])
        return self.port

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the front (calls in flight get its grace of 5 s)."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout_s + 1.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
