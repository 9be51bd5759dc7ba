"""The ``predictor`` command line: one sub-command per job.

Each sub-command lives in its own module exposing ``register(subparsers)``,
which adds its parser and sets ``func`` to a callable taking the parsed
arguments and returning an exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = (
    "predictor.commands.importing",
    "predictor.commands.replay",
    "predictor.commands.evaluate",
    "collectors.command",
    "predictor.rpc.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="predictor",
        description="Online interference prediction for co-located ML inference batches.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                continue  # that part of the project is not installed in this checkout
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError) as exc:
        print(f"predictor {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
