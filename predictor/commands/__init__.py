"""Sub-commands of the ``predictor`` CLI."""
