"""Online interference prediction for co-located ML inference batches."""

__version__ = "0.1.0"
