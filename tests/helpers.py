"""What several test modules share: the project root and a tiny but real configuration."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Every stage runs end to end on this in a second or two.
TINY = [
    "data.synthetic.n_positive=4", "data.synthetic.n_negative=4", "data.synthetic.n_irrelevant=24",
    "data.synthetic.seq_len=6", "data.synthetic.n_train=80", "data.synthetic.n_test=40",
    "model.d=256", "one_step.eta0=40", "gradient_flow.steps=300", "gradient_flow.log_every=50",
]
