"""Regressors over ``dict[str, float]`` features, in river's style."""
