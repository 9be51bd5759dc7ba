"""Studies of the predictions: accuracy, coverage and what they are worth to a scheduler.

Each is run as ``python -m experiments.studies.<name>`` and writes to
``experiments/results/<name>/`` (the folder is named by the script, not by this package).
"""
