"""What keeps bad or excessive input out of the model: the outlier gate and rate limits."""
