"""The ``predictor`` command line: one sub-command per job.

Each sub-command lives in its own module of :mod:`predictor.cli` exposing
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
taking the parsed arguments and returning an exit status. Importing a
sub-command module is cheap: what its command needs (gRPC, the workload,
``torch``) is imported when the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from predictor.runtime import threads

COMMAND_MODULES = (
    "predictor.cli.importing",
    "predictor.cli.replay",
    "predictor.cli.evaluate",
    "predictor.cli.collect",
    "predictor.cli.serve",
    "predictor.cli.query",
    "predictor.cli.report",
    "predictor.cli.demo",
    "predictor.cli.state",
)

MAIN_EPILOG = """\
Examples:
  predictor serve --warm-start embedded &          # the service, warm from the shipped CPU dataset
  predictor query deadline --device cpu0 --model resnet --batch-size 4 --idle --deadline-ms 40
  predictor report run.jsonl.gz                    # stream a recorded log into the service
  predictor demo                                   # service, real workload and a scheduler (needs [workload])

`predictor COMMAND --help` shows each command's options and examples.
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``predictor`` argument parser with every sub-command registered.

    Returns
    -------
    argparse.ArgumentParser
        Parsed arguments carry ``command`` (the sub-command) and ``func`` (what runs it).
    """
    parser = argparse.ArgumentParser(
        prog="predictor",
        description="Online interference prediction for co-located ML inference batches.",
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        metavar="N",
        help=f"BLAS threads per process (default ${threads.ENV_VAR}, else {threads.DEFAULT_THREADS}; 0 = leave as is)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``predictor`` command line.

    Parameters
    ----------
    argv
        Arguments without the program name; ``None`` for ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status: 0 on success, 2 on a bad input (``ValueError``, ``OSError``), 130 on Ctrl-C.
    """
    args = build_parser().parse_args(argv)
    try:
        threads.pin_blas_threads(args.blas_threads)
        if args.blas_threads is not None:  # the processes it starts (predictor serve --workers N) limit theirs alike
            os.environ[threads.ENV_VAR] = str(args.blas_threads)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError) as exc:
        print(f"predictor {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
