"""Durability helpers shared by snapshots, the observation log and the live view's side log."""

from __future__ import annotations

import os
from pathlib import Path


class SnapshotError(RuntimeError):
    """A snapshot that cannot be read or does not fit its reader; nothing was loaded
    (:mod:`predictor.snapshot`, which exports it; defined here so that a client, which maps it to a
    status, reads it without loading the learners)."""


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename or a new file) to disk; best effort where unsupported."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def close_quietly(fd: int | None) -> None:
    """Close a file descriptor that is being given up (after a failed write, or at a stop),
    ignoring a failure to close it: there is nothing left to save in it."""
    if fd is None:
        return
    try:
        os.close(fd)
    except OSError:
        pass
