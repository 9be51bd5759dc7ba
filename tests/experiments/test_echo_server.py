"""The RPC benchmark's echo floor (:mod:`experiments.bench.echo_server`) answers its canned responses."""

from __future__ import annotations

import doctest

from experiments.bench import echo_server


def test_echo_server_docstring_example_runs():
    # experiments/ is outside pytest's --doctest-modules paths: run the example here.
    result = doctest.testmod(echo_server, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
