"""Every claim's negative control fails its check, on a tiny configuration of the whole pipeline with three seeds:
the synthetic data for the theory and the phase grid, and a small generated text dataset whose words carry graded
sentiment for the training runs and the ablations. The claims that such data make plain hold as well, so the
checks are shown to be able to pass and to fail."""

import json
import shutil
import uuid

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from pipelines import (
    ablation,
    ablation_report,
    compare,
    evaluate,
    gradient_flow,
    one_step,
    phase,
    phase_diagram,
    prepare,
    report,
    train,
)
from tests.helpers import ROOT, TINY
from toksel.claims import BY_ID, assess
from toksel.config import load_config
from toksel.report import read_measurements

SEEDS = "base.seeds=[0,1,2]"
TEXT = ["dataset=graded", SEEDS, "train.max_epochs=8", "train.patience=3", "train.batch_size=32", "train.lr=0.03",
        "train.lr_grid=[0.03]", "sequence.cpu.d=8", "sequence.cpu.max_len=12", "sequence.batch_size=32"]
SHARED = ["train.datasets=[graded]", "ablation.datasets=[graded]", "ablation.multiclass=graded",
          "phase.eta0=[5,20,80,320]", "phase.d=[32,64,128,256]"]  # four d: the slope's interval has 2 d.o.f.


LEVELS = 100  # sentiment words per side


def graded_reviews(n: int, rng: np.random.Generator) -> pd.DataFrame:
    """n reviews of 12 words: a word is a sentiment word with probability 0.4, else one of 100 neutral words.
    Sentiment word k (1..LEVELS) comes from the review's own side with probability 0.5 + 0.48 k / LEVELS, so
    the words' posterior differences spread evenly from about 0 to 0.96 on each side. 300 words: a rank
    correlation over them has a chance spread of about 0.06."""
    labels = rng.integers(0, 2, size=n)
    texts = []
    for label in labels:
        words = []
        for _ in range(12):
            if rng.random() < 0.4:
                k = int(rng.integers(1, LEVELS + 1))
                own_side = rng.random() < 0.5 + 0.48 * k / LEVELS
                words.append(f"{'good' if own_side == (label == 1) else 'bad'}{k}")
            else:
                words.append(f"plain{rng.integers(100)}")
        texts.append(" ".join(words))
    return pd.DataFrame({"text": texts, "label": labels})


@pytest.fixture(scope="module")
def controlled(tmp_path_factory):
    """The tiny pipeline, every stage through its entry point, three seeds; the project folder."""
    project = tmp_path_factory.mktemp("controls")
    rng = np.random.default_rng(7)
    (project / "mirror" / "graded").mkdir(parents=True)
    graded_reviews(2000, rng).to_parquet(project / "mirror" / "graded" / "train.parquet")
    graded_reviews(8000, rng).to_parquet(project / "mirror" / "graded" / "test.parquet")
    params = OmegaConf.merge(OmegaConf.load(ROOT / "params.yaml"), OmegaConf.from_dotlist(SHARED))
    params.datasets = {"synthetic": params.datasets.synthetic, "graded": {
        "data": {"source": "hub", "hub_id": "example/graded"}, "model": {"d": 64}, "one_step": {"eta0": 100.0},
        "gradient_flow": {"horizon": 2000.0, "max_margin": False}, "train": {}}}
    OmegaConf.save(params, project / "params.yaml")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        patch.setenv("TOKSEL_DATA_MIRROR", str(project / "mirror"))
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{project / 'mlflow.db'}")
        patch.setenv("TOKSEL_PIPELINE_ID", f"test-{uuid.uuid4().hex[:8]}")
        synthetic = [*TINY, SEEDS]
        for args in (synthetic, TEXT):
            assert prepare.main(args) == 0
            assert one_step.main(args) == 0 and gradient_flow.main(args) == 0  # every seed of base.seeds
        assert train.main(TEXT) == 0  # the three arms
        for variant in ("mlp", "mlp_residual", "two_layer", "two_layer_kq"):
            assert ablation.main([*TEXT, f"sequence.variant={variant}"]) == 0
        for args in (synthetic, TEXT):
            assert evaluate.main(args) == 0
        assert compare.main(TEXT) == 0 and ablation_report.main(TEXT) == 0
        for d in (32, 64, 128, 256):
            assert phase.main([*synthetic, f"model.d={d}"]) == 0
        assert phase_diagram.main(synthetic) == 0
        assert report.main(synthetic) == 0
        yield project
    shutil.rmtree(project / "mlartifacts", ignore_errors=True)


def test_every_claims_control_fails_its_check(controlled):
    config = load_config([SEEDS], controlled / "params.yaml")
    measured = [item for item in read_measurements(controlled / "results") if not item.protocol]
    assessed = {(item.claim, item.data): assess(BY_ID[item.claim], item, config) for item in measured}
    # Every claim is measured here, on every dataset in its scope (graded: the text claims; synthetic: the theory).
    assert {claim for claim, _ in assessed} == set(BY_ID) - {"multiclass_v_increasing"}  # graded has two classes
    not_failing = {key: (item.control_interval.mean, item.control_interval.low, item.control_interval.high,
                         item.control_verdict) for key, item in assessed.items() if item.control_verdict != "fails"}
    assert not not_failing
    metrics = json.loads((controlled / "results" / "report" / "metrics.json").read_text())
    assert metrics["controls_not_failing"] == 0 and metrics["controls_failing"] == len(assessed)


def test_the_claims_the_graded_words_make_plain_hold(controlled):
    config = load_config([SEEDS], controlled / "params.yaml")
    verdicts = {(item.claim, item.data): assess(BY_ID[item.claim], item, config).verdict
                for item in read_measurements(controlled / "results") if not item.protocol}
    for claim in ("accuracy_gap", "v_increasing", "p_u_shape", "lemma41_slope", "lemma42_growth", "kq_v_increasing",
                  "two_layer_u_shape", "mlp_v_positive_side"):
        assert verdicts[claim, "graded"] == "holds", claim
    for claim in ("lemma41_linear", "lemma42_growth", "lemma44_selection", "phase_upper_edge"):
        assert verdicts[claim, "synthetic"] == "holds", claim


def test_the_report_counts_the_verdicts_and_draws_them(controlled):
    text = (controlled / "results" / "report" / "report.md").read_text()
    metrics = json.loads((controlled / "results" / "report" / "metrics.json").read_text())
    assert f"{metrics['claims_held']:.0f} of {metrics['claims']:.0f} claims hold" in text
    assert metrics["claims_inconclusive"] == text.split("## Figures")[0].count("| inconclusive |")
    assert "## How the protocol moves the verdicts" in text and "| matched lr |" in text
    assert "| theory protocol |" in text and "raw per-bin std ratio" in text
    assert (controlled / "results" / "report" / "verdicts.png").stat().st_size > 20_000
