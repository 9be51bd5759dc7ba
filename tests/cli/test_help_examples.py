"""Every ``--help`` of the ``predictor`` command line ends with examples, and every example parses.

The test walks the parser: ``predictor``, each command, and each sub-command (``query predict``, ...).
Each help must hold an ``Examples:`` section with at least one ``predictor <that command> ...``
line; every ``predictor ...`` line of any section is then parsed by the real parser, so that an
example naming a flag that was renamed or removed fails here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex

import pytest

from predictor.cli import build_parser


def _sub_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(command path, parser)`` for ``parser`` and every sub-command below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _sub_parsers(child, (*path, name))


PARSERS = list(_sub_parsers(build_parser()))
COMMANDS = {" ".join(path) for path, _ in PARSERS}


def _examples(text: str) -> list[list[str]]:
    """The ``predictor ...`` command lines of the ``Examples:`` section of a help text, continuation
    lines (``\\``) joined, comments and a trailing ``&`` dropped, as argument lists."""
    section = text.split("Examples:", 1)[1]
    commands, pending = [], ""
    for line in section.splitlines():
        line = line.strip()
        if pending:
            line = pending + " " + line
            pending = ""
        if not line.startswith("predictor "):
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        words = shlex.split(line, comments=True)
        commands.append([w for w in words if w != "&"])
    return commands


def test_the_walk_finds_every_command_and_sub_command():
    assert {"", "query", "query predict", "query deadline", "query rank", "query plan", "query status",
            "demo", "replay", "evaluate", "import", "report", "collect", "serve"} <= COMMANDS


@pytest.mark.parametrize(("path", "parser"), PARSERS, ids=[" ".join(p) or "predictor" for p, _ in PARSERS])
def test_every_help_has_examples_of_its_own_command_that_parse(path, parser):
    text = parser.format_help()
    assert "Examples:" in text, f"`predictor {' '.join(path)} --help` has no Examples section"
    examples = _examples(text)
    prefix = ["predictor", *path]
    own = [e for e in examples if e[: len(prefix)] == prefix and (path or len(e) > 1)]
    assert own, f"`predictor {' '.join(path)} --help` shows no example of `{' '.join(prefix)}`"
    for argv in examples:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                build_parser().parse_args(argv[1:])
            except SystemExit:
                pytest.fail(f"example of `predictor {' '.join(path)} --help` does not parse: "
                            f"{shlex.join(argv)}\n{err.getvalue()}")
