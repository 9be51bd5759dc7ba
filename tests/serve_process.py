"""``predictor serve`` as a real child process, for tests that kill it, soak it or read its logs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ServeProcess:
    """A running ``predictor serve`` and where to reach it."""

    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        """The output once it holds ``text``. The start-up line (what was restored, "SERVING") is
        printed after health turns ``SERVING``, so a client that saw the server ready may read
        the output before it."""
        end = time.monotonic() + timeout
        while text not in (output := self.output()):
            assert time.monotonic() < end, output
            time.sleep(0.05)
        return output

    def kill(self) -> None:
        """SIGKILL: no handler runs, no final snapshot, nothing flushed by the process."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM and wait: the graceful path (final snapshot)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)


def start_server(folder: Path, *args: str, name: str = "serve", timeout: float = 60) -> ServeProcess:
    """Start ``predictor serve --port 0`` with ``args``; return once it listens (``--port-file``).

    stdout and stderr go to ``folder/<name>.log``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    port_file = folder / f"{name}.port"
    port_file.unlink(missing_ok=True)
    log_path = folder / f"{name}.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "predictor.cli",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--metrics-port",
                "0",
                "--port-file",
                str(port_file),
                "--grace",
                "0.5",
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
        )
    deadline = time.monotonic() + timeout
    while not port_file.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"predictor serve exited with {proc.returncode}:\n{log_path.read_text()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError(f"predictor serve did not listen within {timeout} s:\n{log_path.read_text()}")
        time.sleep(0.02)
    return ServeProcess(proc, int(port_file.read_text()), log_path)


@contextlib.contextmanager
def serving_in_thread(config: Any, options: Any) -> Iterator[str]:
    """``serve(config, options)`` in a thread of this process (``options.port_file`` set), until
    the block ends; yields its ``127.0.0.1:port`` once it answers health checks."""
    from predictor.rpc.client import InterferenceClient
    from predictor.rpc.processes.serve import serve

    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(config, options, stop))
    thread.start()
    try:
        port_file = Path(options.port_file)
        deadline = time.monotonic() + 20
        while not port_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        target = f"127.0.0.1:{port_file.read_text().strip()}"
        with InterferenceClient(target) as client:
            client.wait_ready(20)
        yield target
    finally:
        stop.set()
        thread.join(timeout=20)
