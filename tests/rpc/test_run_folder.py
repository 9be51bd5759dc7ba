"""The supervisor's run folder: named after it, and left-overs of supervisors killed by SIGKILL swept."""

from __future__ import annotations

import os
import subprocess
import sys

from predictor.rpc.processes.supervisor import RUN_PREFIX, run_folder


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_run_folder_sweeps_the_folders_of_dead_supervisors_only(tmp_path):
    dead = tmp_path / f"{RUN_PREFIX}{_dead_pid()}-abc"
    alive = tmp_path / f"{RUN_PREFIX}{os.getpid()}-def"
    unrelated = tmp_path / f"{RUN_PREFIX}notapid-ghi"
    for folder in (dead, alive, unrelated):
        folder.mkdir()
        (folder / "models-0.pickle").write_bytes(b"x")

    made = run_folder(str(tmp_path))

    assert not dead.exists()
    assert alive.exists() and unrelated.exists()
    assert made.name.startswith(f"{RUN_PREFIX}{os.getpid()}-") and made.is_dir()
    assert made.stat().st_mode & 0o777 == 0o700
