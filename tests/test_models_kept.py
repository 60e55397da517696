"""Trained models are kept and can be looked at: model.npz of every arm, `python -m toksel.explain` on a review,
the report's section of real test reviews shaded by attention; and what each MLflow run says of its origin."""

import json
import shutil

import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from pipelines import prepare, report, train
from tests.helpers import ALL_ARMS, OPTIMISER, TINY, TINY_TRAIN, published_runs, seed_folder
from toksel import explain
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.models.reading import read_sequence
from toksel.report.render_check import BROWSERS, render
from toksel.runtime.errors import ToksError
from toksel.summaries.shading import shade
from toksel.training.classifier import BagClassifier
from toksel.training.data import batch_of_rows


@pytest.fixture
def trained(prepared):
    assert train.main([*TINY, *TINY_TRAIN, ALL_ARMS]) == 0
    return prepared


def test_every_arm_keeps_its_model_and_its_reading_is_the_models_own(trained):
    for arm in ("trained", "untrained", "one_step"):
        folder = seed_folder(trained, "train", f"synthetic/{arm}")
        about = json.loads((folder / "model.json").read_text())
        assert (about["embeddings"], about["model"], about["seed"]) == (arm, "one_layer", 0)
        with np.load(folder / "model.npz") as model:
            assert ("E" in model.files) == (arm == "trained") and {"p", "v", "scores", "values"} <= set(model.files)
            scores, values, p, v = (model[name] for name in ("scores", "values", "p", "v"))
            E = model["E"] if arm == "trained" else None
        if E is None:
            continue
        # The reading from the kept scores and values is the model's own output on the same review.
        split = PackedSplit.load(data_dir("synthetic", 0) / "test.npz")
        module = BagClassifier(torch.tensor(E), torch.tensor(p), torch.tensor(v), torch.zeros(len(E), dtype=bool),
                               train_embeddings=True, **OPTIMISER)
        with torch.no_grad():
            logits = module.logits(batch_of_rows(split, np.arange(3)))
        for row in range(3):
            ids = split.seq_tokens[split.seq_indptr[row]:split.seq_indptr[row + 1]]
            reading = read_sequence(scores, values, ids)
            assert reading.weights.sum() == pytest.approx(1)
            assert float(reading.output) == pytest.approx(float(logits[row]), rel=1e-4, abs=1e-5)


def _one_line(err: str) -> str:
    """What a refusal printed: exactly one line on stderr."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_explain_prints_each_token_with_its_weight_and_the_prediction(trained, capsys):
    assert explain.main(["train/synthetic/trained/seed0", "pos1 irr9 irr12 neg5 nosuchword"]) == 0
    printed = capsys.readouterr()
    header, *lines = printed.out.strip().splitlines()
    assert header.split()[:3] == ["token", "weight", "w"] and "uniform weight 1/4" in header
    assert [line.split()[0] for line in lines[:4]] == ["pos1", "irr9", "irr12", "neg5"]
    assert sum(float(line.split()[1]) for line in lines[:4]) == pytest.approx(1, abs=1e-3)
    for line in lines[:4]:  # w T, and a bar on the report's scale: none at or below the uniform weight
        weight, ratio = float(line.split()[1]), float(line.split()[2])
        assert ratio == pytest.approx(4 * weight, abs=0.01)
        assert line.endswith("#" * round(30 * shade(weight, 4))) and (ratio > 1 or not line.endswith("#"))
    assert lines[4].startswith("prediction: ") and len(lines) == 5
    assert "not in the vocabulary, left out: nosuchword" in printed.err  # synthetic data have no <unk>
    assert "profile" not in printed.err  # the full values
    assert explain.main(["train/synthetic/trained/seed0", "pos1 irr9", "profile=quick"]) == 0
    assert "explain: a model of the quick profile's run" in capsys.readouterr().err
    # A model that was not trained: the kept ones are named (each arm's one seed), not the path echoed.
    assert explain.main(["train/synthetic/nosuch/seed0", "pos1"]) == 2
    assert _one_line(capsys.readouterr().err) == (
        "explain: no kept model at results/train/synthetic/nosuch/seed0; the kept models: "
        "train/synthetic/one_step/seed0, train/synthetic/trained/seed0, train/synthetic/untrained/seed0")
    # A review with no known word is refused, not read as a confident-looking prediction.
    assert explain.main(["train/synthetic/trained/seed0", "nosuchword another one"]) == 2
    assert _one_line(capsys.readouterr().err).startswith(
        "explain: no word of the review is in synthetic's vocabulary (unknown: nosuchword another one)")
    # prepare again with another vocabulary: the model's token ids would read other words, so it is refused.
    assert prepare.main([*TINY, "data.synthetic.n_irrelevant=26"]) == 0
    assert explain.main(["train/synthetic/trained/seed0", "pos1 irr9"]) == 2
    assert "was trained on another vocabulary" in capsys.readouterr().err.strip().splitlines()[-1]
    assert prepare.main(TINY) == 0  # as the other tests of this module want it


def test_explain_json_gives_the_prediction_probabilities_weights_and_unknown_words(trained, capsys):
    assert explain.main(["results/train/synthetic/trained/seed0", "pos1 nosuchword irr9 neg5", "--json"]) == 0
    printed = capsys.readouterr()
    found = json.loads(printed.out)
    assert printed.err == ""  # the unknown words are in the object
    assert found["profile"] == "full"
    assert (found["model"], found["dataset"], found["unknown"]) == ("train/synthetic/trained/seed0", "synthetic",
                                                                    ["nosuchword"])
    assert found["unknown_read_as"] is None  # left out: the synthetic vocabulary has no <unk>
    assert [token["token"] for token in found["tokens"]] == ["pos1", "irr9", "neg5"]
    weights = [token["weight"] for token in found["tokens"]]
    assert sum(weights) == pytest.approx(1) and all(weight > 0 for weight in weights)
    probabilities = found["probabilities"]
    assert set(probabilities) == {"negative", "positive"} and sum(probabilities.values()) == pytest.approx(1)
    assert found["prediction"] == max(probabilities, key=probabilities.get)
    # The same reading as the table prints.
    assert explain.main(["train/synthetic/trained/seed0", "pos1 nosuchword irr9 neg5"]) == 0
    table = capsys.readouterr().out.strip().splitlines()
    assert [float(line.split()[1]) for line in table[1:4]] == pytest.approx(weights, abs=1e-4)  # after its header


def test_explain_has_a_help_with_examples_and_says_bad_usage_in_one_line(tmp_path, monkeypatch, capsys):
    assert explain.main(["--help"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("usage: python -m toksel.explain [-h] [--json] run text [key=value ...]\n")
    assert "examples:" in shown and "--json" in shown and "exit codes:" in shown
    assert 'python -m toksel.explain train/imdb/trained/seed0 "A wonderful, moving film.' in shown
    assert explain.main(["train/synthetic/trained/seed0"]) == 2  # no review
    assert _one_line(capsys.readouterr().err) == ("explain: the following arguments are required: text (see python -m "
                                                  "toksel.explain --help)")
    assert explain.main(["train/synthetic/trained/seed0", "pos1", "--colour"]) == 2
    assert "unrecognized arguments: --colour" in _one_line(capsys.readouterr().err)
    monkeypatch.chdir(tmp_path)  # a project where nothing was trained yet
    assert explain.main(["train/imdb/trained/seed0", "great"]) == 2
    assert "none is kept yet: train one first" in _one_line(capsys.readouterr().err)


def test_explain_reads_unknown_words_as_unk_where_the_vocabulary_has_it_and_needs_one_known_word():
    words = ["<unk>", "great", "film"]
    assert explain._tokens("A great film, zzz", words, None, "imdb") == (["a", "great", "film", ",", "zzz"],
                                                                       ["a", ",", "zzz"])
    assert explain._tokens("great film zzz", words, 2, "imdb") == (["great", "film"], [])  # data.max_len: 2
    with pytest.raises(ToksError, match="no word of the review is in imdb's vocabulary \\(unknown: zzz a\\)"):
        explain._tokens("zzz a", words, None, "imdb")
    with pytest.raises(ToksError, match="the review has no word to read"):
        explain._tokens("  ", words, None, "imdb")


@pytest.mark.slow  # 8 s or more: make test-slow (make test stays under 5 minutes)
def test_the_report_shows_real_reviews_shaded_by_each_arms_attention(trained, tmp_path):
    assert report.main([*TINY, *TINY_TRAIN]) == 0
    page = (trained / "results" / "report" / "report.html").read_text()
    assert "What the models select in real reviews" in page and page.count("<tr>\n<td>trained</td>") >= 2
    assert all(f"<tr>\n<td>{arm}</td>" in page for arm in ("untrained", "one_step"))
    assert "What the models select in real reviews" in (trained / "results" / "report" / "report.md").read_text()
    if any(shutil.which(name) for name in BROWSERS):
        rendering = render(trained / "results" / "report" / "report.html", tmp_path / "report.png")
        assert rendering.tokens > 0 and rendering.ok


def test_a_run_names_its_dataset_its_commit_and_its_dvc_experiment(prepared, monkeypatch):
    from pipelines import gradient_flow

    monkeypatch.setenv("DVC_EXP_NAME", "eager-pika")
    assert gradient_flow.main([*TINY, "dataset=synthetic"]) == 0
    runs = published_runs(prepared, "tags.stage = 'gradient_flow'")
    client = MlflowClient(f"sqlite:///{prepared / 'mlflow.db'}")
    assert client.get_experiment_by_name("toksel").tags["mlflow.experimentKind"] == "custom_model_development"
    run = runs[0]
    assert run.data.tags["dvc.experiment"] == "eager-pika"
    assert run.info.run_name == "gradient_flow synthetic seed 0 [eager-pika]"  # apart from another experiment's
    assert client.get_run(run.data.tags["mlflow.parentRunId"]).info.run_name == "eager-pika"  # the experiment
    assert run.data.tags["mlflow.source.git.commit"]
    assert run.data.tags["mlflow.source.name"] == "pipelines/gradient_flow.py"
    dataset = run.inputs.dataset_inputs[0].dataset
    assert (dataset.name, dataset.source) == ("synthetic", "synthetic (assumption1)") and len(dataset.digest) == 12
