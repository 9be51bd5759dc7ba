"""Doctest collection of this package needs ray (the ``ray`` extra); without it the modules are skipped."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("ray") else ["*.py"]
