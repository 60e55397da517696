"""The DVC stages: one thin module per stage, `python -m pipelines.<stage> [key=value ...]`."""
