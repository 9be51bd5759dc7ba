"""Every shell and Python example of the README's quickstart and of docs/schedulers.md runs, against a real server.

The examples are read from the Markdown itself (fenced ``sh`` and ``python`` blocks), so an example
that names a renamed flag, a removed method or a wrong file fails here. They run as written, the way
a user whose service listens elsewhere would run them:

- the server is the one the quickstart starts (``predictor serve`` with the quickstart's own
  arguments), started by this test on a free port (``tests/serve_process.py``); its
  ``predictor serve ... &`` line and ``make setup`` (the environment this test runs in) are the
  only lines not run by bash;
- ``localhost:50051``, where an example writes the address, becomes the test server's address,
  and ``PREDICTOR_TARGET`` (the address ``predictor query`` and ``predictor report`` ask when no
  ``--target`` is given) names it too;
- shell blocks run through ``bash -e`` from the repository root with this interpreter's ``bin``
  first on ``PATH`` (``.venv/bin/`` is that folder); Python blocks run with this interpreter;
- a block calling a tool that is not installed (``grpcurl``) is skipped, saying so;
- the studies' commands (``python -m experiments.studies...``, minutes each) are checked to their
  command line only: the module loads and its ``--help`` lists every flag the example names.

Slow: the server learns the embedded dataset first and two examples stream it again.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.serve_process import start_server

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DOC_ADDRESS = "localhost:50051"
SERVE_LINE = re.compile(r"^(?:\S*/)?predictor serve (?P<args>.*?)\s*&\s*(?:#.*)?$")
STUDY = "-m experiments.studies."

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Example:
    """One fenced block: where it is, its language and its text."""

    source: str  # path:line of the opening fence
    lang: str
    text: str


def _section(text: str, title: str) -> str:
    """The Markdown section under ``## title`` (to the next ``## ``)."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _blocks(path: Path, section: str | None = None) -> list[Example]:
    text = path.read_text()
    body = _section(text, section) if section else text
    offset = text.index(body)
    out = []
    for match in re.finditer(r"^```(sh|bash|python)\n(.*?)^```$", body, re.S | re.M):
        line = text[: offset + match.start()].count("\n") + 1
        out.append(Example(f"{path.relative_to(ROOT)}:{line}", match.group(1), match.group(2)))
    return out


EXAMPLES = _blocks(ROOT / "README.md", "Quickstart") + _blocks(ROOT / "docs" / "schedulers.md")


def _serve_args() -> list[str]:
    """The arguments the quickstart gives ``predictor serve``."""
    for example in EXAMPLES:
        for line in example.text.splitlines():
            if match := SERVE_LINE.match(line.strip()):
                return shlex.split(match.group("args"), comments=True)
    raise AssertionError("the quickstart starts no `predictor serve ... &`")


def test_the_docs_hold_the_examples_this_test_runs():
    sources = {e.source.split(":")[0] for e in EXAMPLES}
    assert sources == {"README.md", "docs/schedulers.md"}
    assert sum(e.lang == "python" for e in EXAMPLES) >= 2
    assert _serve_args()[:2] == ["--warm-start", "embedded"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = start_server(tmp_path_factory.mktemp("doc-examples"), *_serve_args(), timeout=120)
    try:
        yield proc
    finally:
        proc.stop()


def _env(target: str) -> dict[str, str]:
    return dict(os.environ, PREDICTOR_TARGET=target, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                COLUMNS="120", PYTHONUNBUFFERED="1")


def _shell_script(text: str, target: str) -> str:
    """The block as bash runs it: ``make setup`` and the server's own line left out, the address and
    ``.venv/bin/`` pointed at the test's server and interpreter."""
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("make setup") or SERVE_LINE.match(stripped):
            continue
        kept.append(line)
    return "\n".join(kept).replace(DOC_ADDRESS, target).replace(".venv/bin/", f"{BIN}/") + "\n"


def _check_study(text: str, env: dict[str, str]) -> None:
    """A study's command: the module loads and its ``--help`` lists each flag the example names."""
    command = " ".join(line.rstrip("\\").strip() for line in text.splitlines() if line.strip())
    for one in re.split(r"(?=\S*python \-m experiments\.studies\.)", command):
        if STUDY not in one:
            continue
        words = shlex.split(one, comments=True)
        module = words[words.index("-m") + 1]
        result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        for flag in (w for w in words if w.startswith("--")):
            assert flag in result.stdout, f"{module}: {flag} is not in its --help"


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.source for e in EXAMPLES])
def test_example_runs_against_a_real_server(example, server):
    env = _env(server.target)
    if example.lang == "python":
        code = example.text.replace(DOC_ADDRESS, server.target)
        result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, f"{example.source}\n{code}\n{result.stdout}{result.stderr}"
        assert result.stdout.strip(), f"{example.source} printed nothing"
        return
    if STUDY in example.text:
        _check_study(example.text, env)
        return
    for tool in ("grpcurl",):
        if re.search(rf"^\s*{tool}\b", example.text, re.M) and shutil.which(tool) is None:
            pytest.skip(f"{example.source}: {tool} is not installed here")
    script = _shell_script(example.text, server.target)
    result = subprocess.run(["bash", "-e", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"{example.source}\n{script}\n{result.stdout}{result.stderr}"
