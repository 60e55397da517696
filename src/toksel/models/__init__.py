"""The models: the bag-of-tokens one-layer model, the sequence models, the compiled passes and products."""
