"""Durability helpers shared by snapshots and the observation log: :mod:`predictor.durable`."""

from predictor.durable import fsync_dir

__all__ = ["fsync_dir"]
