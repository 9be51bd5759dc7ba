"""``predictor state``: work on saved service states (``predictor serve --state DIR``).

``predictor state merge A B -o C`` merges two shards' states, learned on disjoint streams, into one
snapshot (:func:`predictor.service.state_merge.merge_snapshots`): ``A`` and ``B`` are snapshot
files or state folders (stop their servers first: a graceful stop writes a final snapshot covering
everything learned). ``C`` is a snapshot file, or a folder that then gets ``service.snapshot``: a
server started with ``--state`` on it answers from the merged state. Incompatible states (other
predictors or predictor settings, calibrators configured otherwise) are refused with what
differs, and nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EPILOG = """\
Examples:
  predictor state merge shard-0/ shard-1/ -o merged/   # then: predictor serve --state merged/
  predictor state merge a.snapshot b.snapshot -o c.snapshot
"""


def register(subparsers: Any) -> None:
    """Add the ``state`` sub-command."""
    parser = subparsers.add_parser(
        "state", help="work on saved service states (merge shards)",
        description="Work on saved service states (the snapshots of predictor serve --state).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    merge = actions.add_parser(
        "merge", help="merge two states learned on disjoint streams into one",
        description="Merge two service states learned on disjoint streams (two shards) into one snapshot.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    merge.add_argument("first", metavar="A", help="a snapshot file or state folder")
    merge.add_argument("second", metavar="B", help="a snapshot file or state folder (its stream taken as after A's)")
    merge.add_argument("-o", "--output", required=True, metavar="C",
                       help="the merged snapshot: a file, or a folder (its service.snapshot)")
    merge.set_defaults(func=run_merge)


def run_merge(args: argparse.Namespace) -> int:
    """Merge ``args.first`` and ``args.second`` into ``args.output``."""
    from predictor.service.state import SNAPSHOT_FILE
    from predictor.service.state_merge import MergeError, merge_snapshots
    from predictor.snapshot import SnapshotError

    out = Path(args.output)
    if out.is_dir() or (not out.suffix and not out.exists()):
        out.mkdir(parents=True, exist_ok=True)
        if (out / SNAPSHOT_FILE).exists():
            print(f"predictor state merge: error: {out / SNAPSHOT_FILE} exists: give another output",
                  file=sys.stderr)
            return 2
        out = out / SNAPSHOT_FILE
    try:
        header = merge_snapshots(args.first, args.second, out)
    except (MergeError, SnapshotError, OSError) as exc:
        print(f"predictor state merge: error: {exc}", file=sys.stderr)
        return 2
    print(f"predictor state merge: {header['observations']} observations ({header['predictor']}) written to {out}")
    return 0
