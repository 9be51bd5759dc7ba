"""BLAS is pinned to one thread per process in every entry point (issue 14, item 1)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from serve_process import start_server

from predictor.runtime import threads


def test_pin_limits_every_blas_library_and_restores() -> None:
    before = threads.blas_threads()
    assert before, "NumPy and SciPy load at least one BLAS library"
    previous = threads.pin_blas_threads(1)
    try:
        assert set(threads.blas_threads().values()) == {1}
    finally:
        threads.restore_blas_threads(previous)
    assert threads.blas_threads() == before


def test_configured_threads_argument_then_environment_then_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    assert threads.configured_threads() == 1
    monkeypatch.setenv(threads.ENV_VAR, "3")
    assert threads.configured_threads() == 3
    assert threads.configured_threads(2) == 2
    monkeypatch.setenv(threads.ENV_VAR, "many")
    with pytest.raises(ValueError, match=threads.ENV_VAR):
        threads.configured_threads()
    with pytest.raises(ValueError, match="BLAS threads"):
        threads.configured_threads(-1)


def test_the_command_line_pins_blas_before_running_a_command(tmp_path) -> None:
    log = tmp_path / "tiny.jsonl"
    line = '{"schema": "coloc/v1", "device": "cpu0", "batch": {"model": "m", "batch_size": 1}, "latency_ms": 2.0}'
    log.write_text((line + "\n") * 8)
    # a real sub-command in a fresh process; BLAS's state read after it ran
    probe = (
        "import sys\n"
        "from predictor.cli.main import main\n"
        "from predictor.runtime import threads\n"
        "status = main(['replay', sys.argv[1], '--predictor', 'rls'])\n"
        "print('BLAS', sorted(set(threads.blas_threads().values())))\n"
        "sys.exit(status)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != threads.ENV_VAR}
    done = subprocess.run([sys.executable, "-c", probe, str(log)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "BLAS [1]" in done.stdout


def test_the_server_process_reports_one_blas_thread(tmp_path) -> None:
    server = start_server(tmp_path)  # returns once it listens: start-up has been logged
    server.stop()
    match = re.search(r"BLAS threads: (\S+)", server.output())
    assert match, server.output()
    assert match.group(1) == "1"


def test_every_process_of_a_multi_process_server_reports_one_blas_thread(tmp_path) -> None:
    """The learner and the workers are new interpreters (spawned): each limits BLAS itself, as the supervisor did."""
    server = start_server(tmp_path, "--workers", "2")
    server.stop()
    output = server.output()
    for role in ("learner-0", "worker-0", "worker-1"):
        match = re.search(rf"{role} INFO BLAS threads: (\S+)", output)
        assert match, output
        assert match.group(1) == "1", role
