"""The report's section on what the models select in real reviews.

For each training dataset, a few reviews of its test split (short ones, so a page shows them whole): for the
first and the last class, one the trained model gets right and one it gets wrong. Each is shown as the models
of the three embedding arms (first seed) read it: every token shaded by its attention weight, and the
prediction. The paper's claim made visible: with trained embeddings, <cls> attends to the important words.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.models.reading import Reading, read_sequence
from toksel.report.markdown import escape
from toksel.runtime.config import EMBEDDINGS, Config
from toksel.runtime.io import read_npz
from toksel.runtime.paths import results_dir, seed_dir

MODEL = "model.npz"  # what a training stage keeps of each fitted model (training/record.py)
MAX_TOKENS = 40  # a review shown whole on a line or two
TOP_WORDS = 3  # the Markdown version names the words with the largest weights


@dataclass(frozen=True)
class ShownReview:
    dataset: str
    row: int  # in the test split
    label: int
    num_classes: int
    case: str  # "right" or "wrong", as the trained model predicts it
    words: list[str]
    readings: dict[str, Reading]  # arm -> its reading


def class_name(k: int, num_classes: int) -> str:
    return ("negative", "positive")[k] if num_classes == 2 else f"class {k}"


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


def _prediction(reading: Reading, num_classes: int) -> str:
    k = reading.predicted
    return f"{class_name(k, num_classes)} ({reading.probabilities[k]:.2f})"


def readings_markdown(reviews: list[ShownReview]) -> list[str]:
    """Per review and arm: the prediction and the words with the largest weights (report.html shades them all)."""
    if not reviews:
        return []
    lines = ["## What the models select in real reviews", "",
             "Short test reviews, read by each embedding arm's model (first seed): the prediction and the "
             f"{TOP_WORDS} words with the largest attention weight. report.html shades every token by its weight.", ""]
    for review in reviews:
        lines += [f"**{escape(_caption(review))}**: {escape(' '.join(review.words))}", ""]
        rows = []
        for arm, reading in review.readings.items():
            top = np.argsort(-reading.weights, kind="stable")[:TOP_WORDS]
            rows.append(f"| {arm} | {escape(_prediction(reading, review.num_classes))} | "
                        + ", ".join(f"{escape(review.words[i])} ({reading.weights[i]:.2f})" for i in top) + " |")
        lines += ["| embeddings | prediction | largest weights |", "|---|---|---|", *rows, ""]
    return lines


def readings_html(reviews: list[ShownReview]) -> str:
    """The same reviews with each token shaded by its weight (the largest weight of a reading darkest)."""
    if not reviews:
        return ""
    parts = ["<h2>What the models select in real reviews</h2><p>Short test reviews, read by each embedding arm's "
             "model (first seed): each token shaded by its attention weight, the largest darkest; hover a token "
             "for its weight.</p>"]
    for review in reviews:
        parts.append(f"<h3>{html.escape(_caption(review))}</h3><table class='readings'>")
        for arm, reading in review.readings.items():
            largest = reading.weights.max()
            shaded = " ".join(
                f"<span class='token' title='{weight:.3f}' style='background: rgba(33, 102, 172, "
                f"{weight / largest:.2f}){'; color: #fff' if weight > 0.6 * largest else ''}'>"
                f"{html.escape(word)}</span>"  # white on the darkest shades, to stay readable
                for word, weight in zip(review.words, reading.weights, strict=True))
            prediction = html.escape(_prediction(reading, review.num_classes))
            parts.append(f"<tr><th>{html.escape(arm)}</th><td>{prediction}</td><td class='reading'>{shaded}</td></tr>")
        parts.append("</table>")
    return "".join(parts)
