"""The ``predictor`` command line: one sub-command per job.

Each sub-command lives in its own module of :mod:`predictor.cli` exposing
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
taking the parsed arguments and returning an exit status. :func:`main` imports
only the module of the command given (:data:`COMMANDS` names the others and
their help lines for ``predictor --help``); what a command needs at run time
(gRPC, the workload, ``torch``) its module imports when the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from predictor.runtime import threads

COMMANDS: dict[str, tuple[str, str]] = {
    "import": ("predictor.cli.importing", "convert a third-party dataset to a coloc/v1 log"),
    "replay": ("predictor.cli.replay", "stream a coloc/v1 log through one predictor"),
    "evaluate": ("predictor.cli.evaluate", "compare predictors on coloc/v1 logs"),
    "collect": ("predictor.cli.collect", "run a real co-located inference workload and log co-location records"),
    "serve": ("predictor.cli.serve", "run the prediction service (gRPC, health, reflection, Prometheus metrics)"),
    "query": ("predictor.cli.query", "ask a running service: predict, deadline, rank, plan, status"),
    "report": ("predictor.cli.report", "stream a coloc/v1 log into a running service (exactly once)"),
    "demo": ("predictor.cli.demo", "the service, the real CPU workload and a sample scheduler, end to end"),
    "state": ("predictor.cli.state", "work on saved service states (merge shards)"),
}
"""Each command: the module that registers it, and its help line (the same as the module gives it)."""

CLIENT_COMMANDS = frozenset({"query", "report"})
"""The commands that only ask a running service: they compute nothing with BLAS, so they neither
load nor limit it (a question answered without loading the learners' libraries)."""

COMMAND_MODULES = tuple(module for module, _ in COMMANDS.values())

MAIN_EPILOG = """\
Examples:
  predictor serve --warm-start embedded &          # the service, warm from the shipped CPU dataset
  predictor query deadline --device cpu0 --model resnet --batch-size 4 --idle --deadline-ms 40
  predictor report run.jsonl.gz                    # stream a recorded log into the service
  predictor demo                                   # service, real workload and a scheduler (needs [workload])

`predictor COMMAND --help` shows each command's options and examples.
"""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``predictor`` argument parser.

    Parameters
    ----------
    command
        ``None``: every sub-command registered by its module. A name of :data:`COMMANDS`: that one
        registered by its module, the others by name and help line alone (no options, no ``func``),
        so that only its module is imported; ``""``: all by name and help line (enough to say which
        command the arguments choose, and for ``predictor --help``).

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
    for name, (module, help_line) in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(module).register(subparsers)
        else:
            subparsers.add_parser(name, help=help_line, add_help=False)
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
    chosen, _ = build_parser("").parse_known_args(argv)  # which command: argparse's own reading, nothing imported
    args = build_parser(chosen.command).parse_args(argv)
    try:
        if args.command not in CLIENT_COMMANDS:
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
