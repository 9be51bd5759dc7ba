"""``predictor import igniter|gpulet SOURCE -o OUT``: third-party data to ``coloc/v1``."""

from __future__ import annotations

import argparse

from predictor.records.importers.gpulet import import_gpulet
from predictor.records.importers.igniter import import_igniter
from predictor.records.logio import write_records

IMPORTERS = {"igniter": import_igniter, "gpulet": import_gpulet}
IMPORT_EPILOG = """\
Examples:
  predictor import igniter $INTERFERENCE_DATA/igniter-v100/gpulet.config -o igniter.jsonl.gz
  predictor import gpulet $INTERFERENCE_DATA/gpulet-ampere -o gpulet.jsonl.gz
  predictor evaluate igniter.jsonl.gz        # then compare the predictors on it
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``import`` sub-command."""
    parser = subparsers.add_parser(
        "import",
        help="convert a third-party dataset to a coloc/v1 log",
        description="igniter: iGniter's gpulet.config (V100); gpulet: the GPUlet Ampere data/ folder.",
        epilog=IMPORT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("format", choices=sorted(IMPORTERS))
    parser.add_argument("source", help="gpulet.config file (igniter) or folder of CSVs (gpulet)")
    parser.add_argument("-o", "--output", required=True, help="output log (.jsonl or .jsonl.gz)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry of ``predictor import``."""
    count = write_records(args.output, IMPORTERS[args.format](args.source))
    print(f"wrote {count} records to {args.output}")
    return 0
