"""Where the third-party datasets are: an explicit folder, else ``$INTERFERENCE_DATA``.

The repository does not ship the third-party measurements (see
``docs/datasets.md``). Whoever has them points at the folder that holds
``igniter-v100/`` and ``gpulet-ampere/``, either explicitly (``--data`` of the
experiments) or through the environment variable ``INTERFERENCE_DATA``; there
is no default path.

Examples
--------
>>> from pathlib import Path
>>> data_root(None, environ={}) is None
True
>>> data_root(None, environ={"INTERFERENCE_DATA": "/data"}), data_root("here", environ={"INTERFERENCE_DATA": "/x"})
(PosixPath('/data'), PosixPath('here'))
>>> source_path("igniter", Path("/data"))
PosixPath('/data/igniter-v100/gpulet.config')
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

ENV_VAR = "INTERFERENCE_DATA"
SOURCES: dict[str, str] = {
    "igniter": "igniter-v100/gpulet.config",  # iGniter's V100 pairs: one JSON Lines file
    "gpulet": "gpulet-ampere",  # the GPUlet re-implementation's Ampere pairs: a folder of CSVs
}
MARKERS: dict[str, str] = {"igniter": "", "gpulet": "interference.csv"}  # what must exist inside


def data_root(explicit: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None) -> Path | None:
    """The folder holding the third-party datasets, or None when none is given.

    Parameters
    ----------
    explicit
        A folder given on the command line; wins over the environment.
    environ
        The environment to read ``INTERFERENCE_DATA`` from (default: ``os.environ``).
    """
    if explicit:
        return Path(explicit)
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return Path(value) if value else None


def source_path(name: str, root: Path) -> Path:
    """The importer's source for dataset ``name`` (``igniter`` or ``gpulet``) under ``root``."""
    return root / SOURCES[name]


def find_source(name: str, explicit: str | os.PathLike | None = None) -> tuple[Path | None, str]:
    """The source of dataset ``name`` if present, else None and why it is not.

    Parameters
    ----------
    name
        ``igniter`` or ``gpulet``.
    explicit
        The data folder given on the command line, if any (else ``$INTERFERENCE_DATA``).

    Returns
    -------
    tuple
        ``(path, "")`` when the data is there, ``(None, reason)`` otherwise.
    """
    root = data_root(explicit)
    if root is None:
        return None, f"no data folder: pass --data or set {ENV_VAR} to the folder holding {SOURCES[name]}"
    path = source_path(name, root)
    if not (path / MARKERS[name]).exists():
        return None, f"{name} data not found at {path}"
    return path, ""
