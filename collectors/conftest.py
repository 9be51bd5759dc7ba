"""Doctest collection of ``collectors``: the Ray Serve inference deployment needs ray (the ``ray`` extra)."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("ray") else ["ray_inference.py"]
