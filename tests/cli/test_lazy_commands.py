"""``predictor COMMAND`` imports the module of that command only; ``predictor --help`` none of them,
and lists every command with the help line its own module gives it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from predictor.cli.main import COMMANDS, build_parser


def _listing(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each sub-command's help line as ``predictor --help`` lists it."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {choice.dest: choice.help for choice in action._choices_actions}


def test_the_listing_without_imports_is_the_modules_own():
    assert _listing(build_parser("")) == _listing(build_parser()) == {n: h for n, (_, h) in COMMANDS.items()}


def _modules_after(argv: list[str]) -> tuple[int, set[str]]:
    """The exit status of ``main(argv)`` in a fresh interpreter, and the ``predictor.cli``/``predictor.service``
    modules it loaded."""
    code = ("import json, sys\nfrom predictor.cli.main import main\n"
            f"try:\n    status = main({argv!r})\nexcept SystemExit as exit:\n    status = exit.code\n"
            "print(json.dumps([status, sorted(m for m in sys.modules if m.startswith(('predictor.cli.', "
            "'predictor.service')))]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    status, modules = json.loads(done.stdout.splitlines()[-1])
    return status, set(modules)


def test_help_imports_no_command():
    status, modules = _modules_after(["--help"])
    assert status == 0
    assert not modules & {module for module, _ in COMMANDS.values()}
    assert not any(m.startswith("predictor.service") for m in modules)


@pytest.mark.parametrize("command", ["replay", "state"])
def test_a_command_imports_its_own_module_only(command):
    status, modules = _modules_after([command, "--help"])
    assert status == 0
    own = COMMANDS[command][0]
    assert own in modules
    assert not modules & ({module for module, _ in COMMANDS.values()} - {own, "predictor.cli.evaluate"})
    assert "predictor.cli.serve" not in modules


def test_an_unknown_command_is_still_refused_by_name():
    status, _ = _modules_after(["bogus"])
    assert status == 2
