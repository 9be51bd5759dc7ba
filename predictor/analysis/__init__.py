"""What a scheduler would have been told: a log replayed through the service at admission time, and plots.

May import :mod:`predictor.service` and below.
"""
