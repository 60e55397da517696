"""Real-text data: sources (offline mirror), tokenizers, vocabulary, subsampling, and prepare's bad input."""

import dataclasses
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from pipelines import prepare
from tests.helpers import ROOT, dataset_entry
from toksel.data.corpus import PackedSplit
from toksel.data.frequency import average_signed_frequency, class_signed_frequency
from toksel.data.prepared import prepare_text
from toksel.data.sources import balanced_subsample, load_text_split, short_classes
from toksel.data.token_table import read_token_table
from toksel.data.tokenize import train_tokenizer, word_tokens
from toksel.data.vocabulary import UNKNOWN, build_vocabulary
from toksel.params import DataConfig
from toksel.runtime.config import load_config
from toksel.runtime.errors import ToksError

TRAIN = pd.DataFrame({
    "text": ["A great movie!<br /><br />Great acting.", "Great fun, great cast", "Loved it. Great!",
             "Awful plot... awful", "Boring, awful and dull.", "Dull<br/>dull dull", "Great? No: awful."],
    "label": [1, 1, 1, 0, 0, 0, 0],
})
TEST = pd.DataFrame({"text": ["great unseenword", "awful dull"], "label": [1, 0]})
THREE_TEST = pd.DataFrame({"text": ["great unseenword", "awful dull", "dull fun"], "label": [2, 0, 1]})


def _hub_data(**changes: object) -> DataConfig:
    """imdb's data settings from params.yaml, with `changes`: the schema holds no values of its own."""
    return dataclasses.replace(load_config(["dataset=imdb"], ROOT / "params.yaml").data, **changes)


def write_mirror(folder, name="tiny", train=TRAIN, test=TEST):
    (folder / name).mkdir(parents=True, exist_ok=True)
    train.to_parquet(folder / name / "train.parquet")
    test.to_parquet(folder / name / "test.parquet")


@pytest.fixture
def mirror_project(project, monkeypatch):
    """The project with a `tiny` hub dataset whose files come from a mirror in the project folder."""
    write_mirror(project / "mirror")
    monkeypatch.setenv("TOKSEL_DATA_MIRROR", str(project / "mirror"))
    params = OmegaConf.load(project / "params.yaml")
    # Used whole, without bootstrap: one draw, data/processed/tiny/all/, the mirror's rows as they are.
    params.datasets.tiny = dataset_entry(data={"source": "hub", "hub_id": "example/tiny", "bootstrap": False},
                                         model={"d": 32})
    OmegaConf.save(params, project / "params.yaml")
    return project


def test_word_tokenizer_lowercases_drops_line_breaks_and_splits_punctuation():
    assert word_tokens("It's GREAT!<br /><br />Really...") == ["it's", "great", "!", "really", ".", ".", "."]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_subword_tokenizers_train_on_the_split(kind):
    tokenize = train_tokenizer(kind, TRAIN["text"].tolist() * 20, vocab_size=120)
    tokens = tokenize(["Great acting<br />AWFUL plot"])[0]
    assert "<" not in "".join(tokens) and all(token == token.lower() for token in tokens)
    assert len(tokens) >= 4


def test_vocabulary_filters_by_count_and_maps_the_rest_to_unk():
    lists = [["b", "a", "a"], ["a", "c", "b"], ["d"]]
    assert build_vocabulary(lists).words == [UNKNOWN, "a", "b", "c", "d"]
    vocab = build_vocabulary(lists, min_count=2)
    assert vocab.words == [UNKNOWN, "a", "b"]
    assert build_vocabulary(lists, max_vocab=1).words == [UNKNOWN, "a"]
    encoded = vocab.encode([["a", "z", "b", "a"]], max_len=3)
    assert encoded[0].tolist() == [1, 0, 2]


def test_balanced_subsample_is_seeded_and_balanced():
    labels = np.array([0] * 30 + [1] * 70)
    rows = balanced_subsample(labels, 40, np.random.default_rng(0))
    assert np.bincount(labels[rows]).tolist() == [20, 20]
    assert rows.tolist() == balanced_subsample(labels, 40, np.random.default_rng(0)).tolist()
    assert len(balanced_subsample(labels, 0, np.random.default_rng(0))) == 100


def test_a_class_too_small_for_its_share_is_the_same_rows_in_every_draw_and_prepare_says_so(mirror_project):
    labels = np.array([0] * 30 + [1] * 70)
    assert short_classes(labels, 80) == [(0, 30, 40)] and short_classes(labels, 40) == []
    assert short_classes(labels, 0) == [] and short_classes(labels, 100) == []
    # The tiny mirror's training split: 3 positive, 4 negative; a subsample of 6 asks 3 of each.
    with pytest.warns(UserWarning, match=r"class 1 has 3: every draw holds the same 3 rows of it"):
        prepare_text("tiny", _hub_data(hub_id="example/tiny", max_train=6, max_test=0, bootstrap=False, min_count=1),
                     (0, 1))


def test_class_signed_frequency_matches_alpha_for_two_classes_and_its_definition_for_three():
    rng = np.random.default_rng(0)
    sequences = [rng.integers(0, 9, size=rng.integers(2, 9)) for _ in range(40)]
    binary = PackedSplit.from_sequences(sequences, rng.integers(0, 2, size=40), 9)
    np.testing.assert_allclose(class_signed_frequency(binary, 2)[1], average_signed_frequency(binary) / 2,
                               atol=1e-15)
    labels = rng.integers(0, 3, size=40)
    three = PackedSplit.from_sequences(sequences, labels, 9)
    expected = np.zeros((3, 9))
    for sequence, label in zip(sequences, labels, strict=True):
        for k in range(3):
            for token in sequence:
                expected[k, token] += ((label == k) - 1 / 3) / len(sequence) / 40
    np.testing.assert_allclose(class_signed_frequency(three, 3), expected, atol=1e-15)


def test_prepare_packs_a_mirror_dataset_with_unk_left_out_of_the_statistics(mirror_project):
    assert prepare.main(["dataset=tiny"]) == 0
    table = read_token_table(mirror_project / "data" / "processed" / "tiny" / "all" / "tokens.csv")
    tokens = table.frame
    assert table.num_classes == 2 and tokens["word"].iloc[0] == UNKNOWN and tokens["special"].iloc[0]
    assert np.isnan(tokens["alpha"].iloc[0]) and tokens["count_class_1"].iloc[0] == 0
    assert not table.occurring()[0] and np.isnan(table.importance()[0])
    great = tokens.set_index("word").loc["great"]
    assert great["count_class_1"] == 5 and great["count_class_0"] == 1 and great["alpha"] > 0
    assert great["importance"] == great["alpha"] and great["alpha_class_1"] == pytest.approx(great["alpha"] / 2)
    assert tokens.set_index("word").loc["awful", "posterior_difference"] == -1
    assert "<" not in set(tokens["word"]) and "br" not in set(tokens["word"])
    test = PackedSplit.load(mirror_project / "data" / "processed" / "tiny" / "all" / "test.npz")
    assert test.seq_tokens[1] == 0  # "unseenword" -> <unk>
    assert tokens["important"].sum() >= 1


def test_a_real_mirror_dataset_prepares_when_the_shared_mirror_is_there(project, monkeypatch):
    shared = Path(os.environ.get("TOKSEL_DATA_MIRROR", ""))
    if not os.environ.get("TOKSEL_DATA_MIRROR") or not (shared / "imdb" / "train.parquet").exists():
        pytest.skip("no data mirror: $TOKSEL_DATA_MIRROR is unset or holds no imdb")
    monkeypatch.setenv("TOKSEL_DATA_MIRROR", str(shared))
    params = OmegaConf.load(project / "params.yaml")
    params.datasets.imdb = dataset_entry(data={"source": "hub", "hub_id": "stanfordnlp/imdb", "max_train": 200,
                                               "max_test": 100, "max_len": 64})
    OmegaConf.save(params, project / "params.yaml")
    assert prepare.main(["dataset=imdb"]) == 0
    train = PackedSplit.load(project / "data" / "processed" / "imdb" / "seed0" / "train.npz")
    assert train.n == 200 and np.bincount(train.labels).tolist() == [100, 100] and train.lengths.max() == 64


def _bad_input_cases(project):
    folder = project / "mirror"
    return {
        "unknown dataset": (["dataset=nosuch"], "unknown dataset 'nosuch'"),
        "missing mirror file": (lambda: (folder / "tiny" / "test.parquet").unlink(), "mirror file"),
        "wrong columns": (lambda: write_mirror(folder, train=TRAIN.rename(columns={"text": "review"})),
                          "has no column text"),
        "empty split": (lambda: write_mirror(folder, train=TRAIN.iloc[:0]), "is empty"),
        "labels outside the classes": (lambda: write_mirror(folder, test=TEST.assign(label=[1, 2])),
                                       "labels [2] lie outside 0 .. 1"),
        "single class": (lambda: write_mirror(folder, test=TEST.assign(label=[1, 1])),
                         "tiny/test: after dropping 0 reviews with no token, no review of class 0 is left"),
        "a class empty once cleaned": (lambda: write_mirror(folder, train=TRAIN.assign(
            text=["" if label else text for text, label in zip(TRAIN.text, TRAIN.label, strict=True)])),
            "tiny/train: after dropping 3 reviews with no token, no review of class 1 is left"),
        "more classes declared than the data hold": (["data.num_classes=5"], "no review of class 2, 3, 4 is left"),
        "a vocabulary of <unk> alone": (["data.min_count=1000"], "the vocabulary would be <unk> alone"),
        "max_len <= 0": (["data.max_len=0"], "data.max_len = 0 is out of range"),
        "truncated mirror file": (lambda: _truncate(folder / "tiny" / "train.parquet", 200), "not a readable parquet"),
        "empty mirror file": (lambda: _truncate(folder / "tiny" / "train.parquet", 0), "not a readable parquet"),
        "mirror file not parquet": (lambda: (folder / "tiny" / "test.parquet").write_text("text,label\nok,1\n"),
                                    "not a readable parquet"),
        "text not UTF-8": (lambda: write_mirror(folder, test=TEST.assign(text=[b"great", b"caf\xe9"])),
                           "tiny/test: the text of row 1 is not UTF-8"),
    }


def _truncate(path, size):
    path.write_bytes(path.read_bytes()[:size])


@pytest.mark.parametrize("case", ["unknown dataset", "missing mirror file", "wrong columns", "empty split",
                                  "labels outside the classes", "single class", "a class empty once cleaned",
                                  "more classes declared than the data hold", "a vocabulary of <unk> alone",
                                  "max_len <= 0", "truncated mirror file", "empty mirror file",
                                  "mirror file not parquet", "text not UTF-8"])
def test_bad_input_exits_2_with_one_line_and_overwrites_nothing(mirror_project, capsys, case):
    assert prepare.main(["dataset=tiny"]) == 0
    out = mirror_project / "data" / "processed" / "tiny" / "all"
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    capsys.readouterr()
    change, message = _bad_input_cases(mirror_project)[case]
    arguments = ["dataset=tiny"]
    if callable(change):
        change()
    else:
        arguments = [*arguments, *change] if change[0].startswith("data.") else change
    assert prepare.main(arguments) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and message in error[0], error
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_the_hub_path_fails_clearly_offline(monkeypatch):
    monkeypatch.delenv("TOKSEL_DATA_MIRROR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ToksError, match="could not load 'stanfordnlp/imdb'.*TOKSEL_DATA_MIRROR"):
        load_text_split("imdb", _hub_data(), "train")


def test_a_text_dataset_runs_through_every_stage(mirror_project):
    from pipelines import evaluate, gradient_flow, one_step

    small = ["dataset=tiny", "base.seeds=[0]", "gradient_flow.horizon=100",
             "gradient_flow.max_margin=false"]
    for stage in (prepare, one_step, gradient_flow, evaluate):
        assert stage.main(small) == 0, stage.__name__
    results = mirror_project / "results"
    summary = (results / "evaluate" / "tiny" / "summary.md").read_text()
    assert "| `lemma41_linear` Lemma 4.1:" in summary and "| `lemma42_growth` Lemma 4.2:" in summary
    assert "Theorem 4.3" not in summary and "top by E_s^T p:" in summary  # no known important tokens, no QP
    top = (results / "evaluate" / "tiny" / "top_tokens.json").read_text()
    assert "great" in top
    metrics = (results / "gradient_flow" / "tiny" / "seed0" / "metrics.json").read_text()
    assert '"cos_max_margin_selected": null' in metrics and '"score_p_important"' in metrics


def test_multiclass_prepare_writes_per_class_statistics_that_sum_to_zero(mirror_project):
    three = TRAIN.assign(label=[2, 2, 1, 0, 0, 1, 0])
    write_mirror(mirror_project / "mirror", name="three", train=three, test=THREE_TEST)
    params = OmegaConf.load(mirror_project / "params.yaml")
    params.datasets.three = dataset_entry(data={"source": "hub", "hub_id": "example/three", "num_classes": 3,
                                                "bootstrap": False})
    OmegaConf.save(params, mirror_project / "params.yaml")
    assert prepare.main(["dataset=three"]) == 0
    table = read_token_table(mirror_project / "data" / "processed" / "three" / "all" / "tokens.csv")
    assert table.num_classes == 3 and not {"alpha", "token_type", "count_positive"} & set(table.frame.columns)
    tokens = table.frame
    words = tokens[~tokens["special"]]
    alphas = words[[f"alpha_class_{k}" for k in range(3)]].to_numpy()
    np.testing.assert_allclose(alphas.sum(axis=1), 0, atol=1e-15)  # sum_k (1{y = k} - 1/K) = 0
    dull = words.set_index("word").loc["dull"]
    assert [dull[f"count_class_{k}"] for k in range(3)] == [1, 3, 0]
    assert dull["alpha_class_1"] > 0 > dull["alpha_class_2"]
    assert dull["posterior_difference"] == (0 - 1) / 4  # P(last class | s) - P(first class | s)
    assert dull["importance"] == np.abs([dull[f"alpha_class_{k}"] for k in range(3)]).max()


def test_a_token_table_read_with_other_classes_than_declared_is_refused(mirror_project):
    assert prepare.main(["dataset=tiny"]) == 0
    path = mirror_project / "data" / "processed" / "tiny" / "all" / "tokens.csv"
    path.with_suffix(".json").write_text('{"num_classes": 3}')
    with pytest.raises(ToksError, match="does not hold 3 classes"):
        read_token_table(path)


def test_a_multiclass_dataset_runs_through_every_stage_with_k_output_vectors(mirror_project):
    from pipelines import evaluate, gradient_flow, one_step

    write_mirror(mirror_project / "mirror", name="three", train=TRAIN.assign(label=[2, 2, 1, 0, 0, 1, 0]),
                 test=THREE_TEST)
    params = OmegaConf.load(mirror_project / "params.yaml")
    params.datasets.three = dataset_entry(data={"source": "hub", "hub_id": "example/three", "num_classes": 3,
                                                "bootstrap": False}, model={"d": 64},
                                          gradient_flow={"max_margin": False})
    OmegaConf.save(params, mirror_project / "params.yaml")
    small = ["dataset=three", "base.seeds=[0]", "gradient_flow.horizon=100"]
    for stage in (prepare, one_step, gradient_flow, evaluate):
        assert stage.main(small) == 0, stage.__name__
    results = mirror_project / "results"
    v = np.load(results / "one_step" / "three" / "seed0" / "embeddings.npz")["v"]
    np.testing.assert_allclose(v.T @ v, np.eye(3), atol=1e-12)  # three orthonormal output vectors
    one_step_metrics = (results / "one_step" / "three" / "seed0" / "metrics.json").read_text()
    assert all(f'"slope_class_{k}"' in one_step_metrics for k in range(3))
    summary = (results / "evaluate" / "three" / "summary.md").read_text()
    assert "(class 0)" in summary and "top by E_s^T v_2" in summary
    scores = pd.read_csv(results / "evaluate" / "three" / "token_scores.csv")
    assert {"posterior_difference", "score_p", "alpha_class_2", "score_v_class_2"} <= set(scores.columns)


def test_labels_keep_the_chosen_source_classes_renumbered_in_their_order(project, monkeypatch):
    stars = pd.DataFrame({"text": [f"review {i}" for i in range(10)], "label": [0, 1, 2, 3, 4, 4, 3, 2, 1, 0]})
    write_mirror(project / "mirror", name="stars", train=stars, test=stars)
    monkeypatch.setenv("TOKSEL_DATA_MIRROR", str(project / "mirror"))
    data = _hub_data(hub_id="example/stars", labels=[0, 1, 3, 4], num_classes=4)
    split = load_text_split("stars4", data, "train")
    assert split.texts == ["review 0", "review 1", "review 3", "review 4", "review 5", "review 6", "review 8",
                           "review 9"]  # the 3-star rows (label 2) are left out
    assert split.labels.tolist() == [0, 1, 2, 3, 3, 2, 1, 0]
    with pytest.raises(ToksError, match=r"data.labels names \[7\]"):
        load_text_split("stars4", _hub_data(hub_id="example/stars", labels=[0, 1, 3, 7], num_classes=4),
                        "train")


def test_labels_must_name_num_classes_distinct_labels(project):

    with pytest.raises(ToksError, match="must list data.num_classes = 4 distinct"):
        load_config(["data.labels=[0,1,1,4]", "data.num_classes=4"])
