"""Negation in real reviews (stage negation, ours, exploratory): the rule that marks a negated review, the one-layer
model read from its kept scores and values, a kept model with positions rebuilt, the negators' readings, and the
stage end to end on tiny data with its report section."""

import json
import math

import numpy as np
import pytest
import torch

from pipelines import ablation, negation, prepare, train
from pipelines.negation import by_word_polarity
from tests.helpers import OPTIMISER, TINY_TRAIN
from toksel.data.corpus import PackedSplit
from toksel.data.negation import Rule, negated_rows, negations, negator_mask, negator_readings, strong_mask
from toksel.data.prepared import token_table
from toksel.data.token_table import read_token_table
from toksel.models.initial import initialise
from toksel.models.reading import bag_outputs, read_sequence
from toksel.models.sequence import LAYOUTS, SequenceClassifier
from toksel.report.negation import HEADING, negation_block
from toksel.runtime.config import load_config
from toksel.training.sequence_classifier import SequenceModule, kept_module
from toksel.training.sequence_data import padded_batch

WORDS = ["<unk>", "the", "film", "is", "not", "never", "no", "don't", "isn't", "bad", "dull", "great", "ok", "?",
         "rare"]
NEGATORS = ("not", "never", "no", "n't")
RULE = Rule(NEGATORS, window=1, min_polarity=0.5, min_count=4)


def _split(reviews: list[str], labels: list[int]) -> PackedSplit:
    ids = {word: token for token, word in enumerate(WORDS)}
    return PackedSplit.from_sequences([np.array([ids[word] for word in review.split()]) for review in reviews],
                                      np.array(labels), len(WORDS))


# The training split sets each word's polarity (min_count 4): bad, dull and ? with the negative label only, great with
# the positive only, ok, the, film and is about alike; rare negative but seen twice; not negative and frequent (a
# negator all the same); don't once and isn't twice, pooled as n't.
TRAIN = _split(["the film is bad bad", "dull film is bad dull", "the film is dull dull ? not",
                "not ok ? ? ? rare rare", "not bad not ok don't",
                "great film is great", "the film is ok great", "great ok great", "ok film", "the film is isn't isn't"],
               [0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
# The test reviews, each planting one case: (review, negated with window 1, with window 2)
PLANTED = [("the film is not bad", True, True),  # a negator right before a strong word
           ("great film is not ok", False, False),  # ok carries no sentiment
           ("not the bad film", False, True),  # one token between: window 2 only
           ("isn't great", True, True),  # n't: a contraction, kept whole by the word tokenizer
           ("bad film not", False, False),  # a negator after the word negates nothing
           ("not ? the", False, False),  # punctuation is no sentiment word, however polar
           ("film is not rare", False, False),  # rare is polar but seen twice, under min_count
           ("the film no", False, False),  # a review ends with a negator ...
           ("bad film", False, False),  # ... and the next starts with a strong word: no negation across reviews
           ("never dull never", True, True)]  # a negator never seen in training negates all the same
TEST = _split([review for review, _, _ in PLANTED], [0] * len(PLANTED))
TOKENS = token_table(TRAIN, TEST, 2, WORDS, np.array([word == "<unk>" for word in WORDS]))


def test_the_rule_marks_exactly_the_planted_negations():
    negator, strong = negator_mask(WORDS, NEGATORS), strong_mask(TOKENS, RULE)
    assert [WORDS[i] for i in np.flatnonzero(negator)] == ["not", "never", "no", "don't", "isn't"]
    assert [WORDS[i] for i in np.flatnonzero(strong)] == ["bad", "dull", "great"]  # not ?, rare, nor a negator
    for window, column in ((1, 1), (2, 2)):
        pairs = negations(TEST, negator, strong, window)
        assert negated_rows(TEST, pairs).tolist() == [case[column] for case in PLANTED], window
    pairs = negations(TEST, negator, strong, 1)
    assert [(WORDS[TEST.seq_tokens[a]], WORDS[TEST.seq_tokens[b]]) for a, b in pairs] == [
        ("not", "bad"), ("isn't", "great"), ("never", "dull")]
    # By the negated word's own polarity: "not bad", "never dull" negate negative words, "isn't great" a positive one.
    split = by_word_polarity(TEST, pairs, TOKENS)
    assert np.flatnonzero(split["positive"]).tolist() == [3] and np.flatnonzero(split["negative"]).tolist() == [0, 9]
    # Cut to the first tokens a model reads: "the film is not bad" has its negation at positions 3 and 4.
    assert not negated_rows(TEST, negations(TEST, negator, strong, 1, max_len=4))[0]
    assert negated_rows(TEST, negations(TEST, negator, strong, 1, max_len=5))[0]


def test_the_negators_readings_pool_the_contractions_and_stand_among_every_token():
    rng = np.random.default_rng(0)
    scores, values = rng.normal(size=len(WORDS)), rng.normal(size=len(WORDS))
    found = {row["negator"]: row for row in negator_readings(TOKENS, scores, values, NEGATORS)}
    alpha, among = TOKENS.column("alpha"), TOKENS.occurring()
    not_, never, dont, isnt = (WORDS.index(word) for word in ("not", "never", "don't", "isn't"))
    assert found["not"]["words"] == ["not"] and found["not"]["count"] == 4
    assert found["not"]["alpha"] == alpha[not_] < 0 and found["not"]["value"] == values[not_]
    assert found["not"]["value_z"] == pytest.approx((values[not_] - values[among].mean()) / values[among].std())
    assert found["not"]["score_percentile"] == pytest.approx(100 * np.mean(scores[among] < scores[not_]))
    # n't: don't once (negative review), isn't twice (positive), read as one token: alpha summed, E_s^T v and
    # E_s^T p averaged over the three occurrences.
    contraction = found["n't"]
    assert contraction["words"] == ["don't", "isn't"] and contraction["count"] == 3
    assert contraction["alpha"] == pytest.approx(alpha[dont] + alpha[isnt])
    assert contraction["value"] == pytest.approx((values[dont] + 2 * values[isnt]) / 3)
    assert contraction["score"] == pytest.approx((scores[dont] + 2 * scores[isnt]) / 3)
    assert found["never"]["count"] == 0 and math.isnan(found["never"]["value"])  # never seen in training


def test_the_one_layer_model_reads_every_review_at_once_as_one_by_one():
    rng = np.random.default_rng(1)
    scores, values = 8 * rng.normal(size=len(WORDS)), rng.normal(size=len(WORDS))  # saturating softmaxes too
    outputs = bag_outputs(scores, values, TEST)
    for row in range(TEST.n):
        ids = TEST.seq_tokens[TEST.seq_indptr[row]:TEST.seq_indptr[row + 1]]
        weights = np.exp(scores[ids]) / np.exp(scores[ids]).sum()  # the softmax over positions, written out
        assert outputs[row] == pytest.approx(weights @ values[ids], rel=1e-12)
        assert outputs[row] == pytest.approx(float(read_sequence(scores, values, ids).output), rel=1e-12)


@pytest.mark.parametrize("variant", ["mlp", "two_layer_kq"])
def test_a_kept_model_with_positions_is_rebuilt_whole(variant):
    init = initialise(len(WORDS), 8, 0, torch.float32, 2)
    trained = SequenceModule(SequenceClassifier(init.E, init.p, init.v, **LAYOUTS[variant], seed=3),
                             torch.zeros(len(WORDS), dtype=torch.bool), **OPTIMISER)
    with torch.no_grad():  # every parameter away from its initial value, W_KQ and the MLP's included
        for parameter in trained.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    kept = {name.replace(".", "/"): parameter.detach().numpy().copy() for name, parameter in trained.named_parameters()}
    settings = load_config().train
    batch = padded_batch(TEST, np.arange(TEST.n))
    with torch.no_grad():
        assert torch.equal(kept_module(kept, variant, settings).logits(batch), trained.logits(batch))
    missing = {name: array for name, array in kept.items() if "W2" not in name}
    with pytest.raises(RuntimeError, match="W2"):
        kept_module(missing, variant, settings)


PAIR = "synthetic_pair_first_order"  # `not` before `good` (positive) or `bad` (negative), each a strong word
TINY_PAIR = ["base.seeds=[0]", "data.synthetic.n_positive=4", "data.synthetic.n_negative=4",
             "data.synthetic.n_irrelevant=24", "data.synthetic.seq_len=6", "data.synthetic.n_train=240",
             "data.synthetic.n_test=80", "model.d=64", "one_step.eta0=40"]
TINY_RUNS = [*TINY_PAIR, *(item for item in TINY_TRAIN if not item.startswith("train.datasets")),
             f"train.datasets=[{PAIR}]", f"ablation.datasets=[{PAIR}]", "ablation.variants=[mlp]", "sequence.cpu.d=16",
             "sequence.batch_size=16"]
TINY_NEGATION = [*TINY_RUNS, f"negation.dataset={PAIR}", f"negation.models=[train/{PAIR}/trained,ablation/{PAIR}/mlp]",
                 "negation.window=5", "negation.min_count=1", "negation.examples=2"]


def _planted_count(project, window: int) -> int:
    """The negated test reviews counted by hand: a `not` with a strong word at most `window` tokens after it."""
    folder = project / "data/processed" / PAIR / "seed0"
    table = json.loads((project / "results/negation/negation.json").read_text())
    test = PackedSplit.load(folder / "test.npz")
    tokens = read_token_table(folder / "tokens.csv")
    polar = np.abs(np.nan_to_num(tokens.column("posterior_difference"))) >= table["rule"]["min_polarity"]
    words, count = tokens.words, 0
    for row in range(test.n):
        ids = test.seq_tokens[test.seq_indptr[row]:test.seq_indptr[row + 1]]
        count += any(words[a] == "not" and polar[b] and words[b] != "not"
                     for i, a in enumerate(ids) for b in ids[i + 1:i + 1 + window])
    return count


@pytest.mark.slow  # 8 s or more: make test-slow (make test stays under 5 minutes)
def test_the_stage_reads_each_kept_model_and_the_report_shows_it(project):
    assert negation_block(project / "results/negation").paragraphs == [
        "The negation stage has not run (dvc repro negation)."]
    assert prepare.main([f"dataset={PAIR}", *TINY_PAIR]) == 0
    assert train.main([f"dataset={PAIR}", *TINY_RUNS]) == 0
    assert ablation.main([f"dataset={PAIR}", *TINY_RUNS, "sequence.variant=mlp"]) == 0
    assert negation.main(TINY_NEGATION) == 0
    out = project / "results/negation"
    found = json.loads((out / "negation.json").read_text())
    rows = {row["model"]: row for row in found["accuracy"]}
    assert list(rows) == [f"train/{PAIR}/trained", f"ablation/{PAIR}/mlp"]
    expected = _planted_count(project, 5)
    assert 0 < rows[f"train/{PAIR}/trained"]["negated"] == expected < rows[f"train/{PAIR}/trained"]["reviews"]
    for model, row in rows.items():  # the accuracy on every test review is the run's own, split in two
        recorded = json.loads((project / "results" / model / "seed0/metrics.json").read_text())["test_accuracy"]
        assert row["test_accuracy"] == pytest.approx(recorded, abs=1e-6)
        parts = row["accuracy_negated"] * row["negated"] + row["accuracy_other"] * (row["reviews"] - row["negated"])
        assert parts == pytest.approx(row["test_accuracy"] * row["reviews"])
        # Each negated review negates a positive word, a negative one, or both.
        assert max(row["negated_positive"], row["negated_negative"]) <= row["negated"] <= (
            row["negated_positive"] + row["negated_negative"])
    assert [row["negator"] for row in found["negators"]] == ["not", "never", "no", "n't"]  # the one-layer model's
    assert found["negators"][0]["words"] == ["not"] and found["negators"][1]["words"] == []
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics[f"train_{PAIR}_trained_negated_reviews"] == expected
    assert metrics[f"ablation_{PAIR}_mlp_difference"] == pytest.approx(rows[f"ablation/{PAIR}/mlp"]["difference"])
    shaded = (out / "examples.md").read_text()
    assert shaded.count("### ") == 2 and shaded.count("border-bottom") >= 4  # each negator and its word underlined
    assert (out / "negation.png").stat().st_size > 10_000 and "![negation.png]" in (out / "summary.md").read_text()
    block = negation_block(out)
    assert block.heading == HEADING and sum(text.startswith("| model |") for text in block.paragraphs) == 2
    # A kept model whose recorded accuracy is not what it reads back (its data or itself changed): refused.
    metrics_file = project / "results/train" / PAIR / "trained/seed0/metrics.json"
    recorded = json.loads(metrics_file.read_text())
    metrics_file.write_text(json.dumps(recorded | {"test_accuracy": recorded["test_accuracy"] - 0.1}))
    assert negation.main(TINY_NEGATION) == 2
