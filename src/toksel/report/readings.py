"""The report's section on what the models select in real reviews.

For each training dataset, a few reviews of its test split (short ones, so a page shows them whole): for the
first and the last class, one the trained model gets right and one it gets wrong. Each is shown as the models
of the three embedding arms (first seed) read it: every token shaded by its attention weight, and the
prediction. The paper's claim made visible: with trained embeddings, <cls> attends to the important words.

The shade is one scale for every review and arm (summaries/shading.py): the weight w against the uniform weight
1/T of a review of T tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.models.reading import Reading, read_sequence
from toksel.params import EMBEDDINGS, Config
from toksel.runtime.io import read_npz
from toksel.runtime.paths import results_dir, seed_dir
from toksel.summaries.markdown import escape
from toksel.summaries.shading import TOP_WORDS, class_name, legend, reading_table

MODEL = "model.npz"  # what a training stage keeps of each fitted model (training/record.py)
MAX_TOKENS = 40  # a review shown whole on a line or two


@dataclass(frozen=True)
class ShownReview:
    dataset: str
    row: int  # in the test split
    label: int
    num_classes: int
    case: str  # "right" or "wrong", as the trained model predicts it
    words: list[str]
    readings: dict[str, Reading]  # arm -> its reading


def kept_models(dataset: str, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """The arms' kept models (model.npz) of `dataset` and `seed` that exist."""
    paths = {arm: seed_dir(results_dir("train", f"{dataset}/{arm}"), seed) / MODEL for arm in EMBEDDINGS}
    return {arm: read_npz(path, producer="train") for arm, path in paths.items() if path.exists()}


def shown_reviews(dataset: str, seed: int) -> list[ShownReview]:
    """For the first and last class: the first short test review the trained model gets right, and the first it
    gets wrong (in the split's order); none when the trained arm has no kept model."""
    models = kept_models(dataset, seed)
    if "trained" not in models:
        return []
    data = data_dir(dataset, seed)  # the vocabulary and test split the models were trained with
    tokens = read_token_table(data / "tokens.csv")
    words = tokens.words
    test = PackedSplit.load(data / "test.npz")
    shown_classes = (0, tokens.num_classes - 1)
    wanted = {(label, case) for label in shown_classes for case in ("right", "wrong")}
    shown = []
    for row in range(test.n):
        ids, label = test.seq_tokens[test.seq_indptr[row]:test.seq_indptr[row + 1]], int(test.labels[row])
        if len(ids) > MAX_TOKENS or label not in shown_classes:
            continue
        readings = {arm: read_sequence(model["scores"], model["values"], ids) for arm, model in models.items()}
        case = "right" if readings["trained"].predicted == label else "wrong"
        if (label, case) in wanted:
            wanted.remove((label, case))
            shown.append(ShownReview(dataset, row, label, tokens.num_classes, case, [words[i] for i in ids],
                                     readings))
        if not wanted:
            break
    return sorted(shown, key=lambda review: (review.label, review.case))


def all_shown(config: Config) -> list[ShownReview]:
    return [review for dataset in config.train.datasets for review in shown_reviews(dataset, config.training_seeds[0])]


def _caption(review: ShownReview) -> str:
    return (f"{review.dataset}, test review {review.row}: {class_name(review.label, review.num_classes)}, the "
            f"trained model is {review.case}")


def readings_section(reviews: list[ShownReview]) -> str:
    """The section in Markdown: per review and arm, the prediction, the largest weights and the review with every
    token shaded by its weight against uniform (inline HTML: report.html shows the shades, report.md the words)."""
    if not reviews:
        return ""
    lines = ["## What the models select in real reviews", "",
             "Short test reviews, read by each embedding arm's model (first seed): the prediction, the "
             f"{TOP_WORDS} words with the largest attention weight, each with its weight and w T, and the review "
             "with every token shaded.", "", legend(), ""]
    for review in reviews:
        lines += [f"### {escape(_caption(review))}", "", *reading_table(review.words, review.readings,
                                                                          review.num_classes), ""]
    return "\n".join(lines) + "\n"
