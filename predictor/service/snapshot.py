"""The service's snapshot: the format of :mod:`predictor.snapshot` in a file of the state folder.

The service writes its state with :func:`write_payload` (the payload taken with
:func:`dump_state` under its lock) to ``FILE_NAME`` in its state folder, and
restores it with :func:`read_snapshot`; :func:`read_header` tells what a
snapshot covers without loading it.
"""

from predictor.snapshot import (
    FORMAT,
    MAGIC,
    MAX_HEADER_BYTES,
    VERSION,
    SnapshotError,
    dump_state,
    read_header,
    read_snapshot,
    write_payload,
    write_snapshot,
)

FILE_NAME = "service.snapshot"
"""The snapshot's file name in the service's state folder."""

__all__ = [
    "FILE_NAME",
    "FORMAT",
    "MAGIC",
    "MAX_HEADER_BYTES",
    "VERSION",
    "SnapshotError",
    "dump_state",
    "read_header",
    "read_snapshot",
    "write_payload",
    "write_snapshot",
]
