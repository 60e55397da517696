"""The report's section on what the models select in real reviews.

For each training dataset, a few reviews of its test split (short ones, so a page shows them whole): for the
first and the last class, one the trained model gets right and one it gets wrong. Each is shown as the models
of the three embedding arms (first seed) read it: every token shaded by its attention weight, and the
prediction. The paper's claim made visible: with trained embeddings, <cls> attends to the important words.

The shade is one scale for every review and arm: the weight w against the uniform weight 1/T of a review of T
tokens, w T. A token at or below uniform (w T <= 1) is not shaded; above it the shade deepens with log(w T), the
darkest from SHADE_CAP times uniform on. A near-uniform reading thus stays pale however its largest weight
compares with the rest, and a peaked one is dark on the few tokens it selects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.models.reading import Reading, read_sequence
from toksel.params import EMBEDDINGS, Config
from toksel.runtime.io import read_npz
from toksel.runtime.paths import results_dir, seed_dir
from toksel.summaries.markdown import escape, literal

MODEL = "model.npz"  # what a training stage keeps of each fitted model (training/record.py)
MAX_TOKENS = 40  # a review shown whole on a line or two
TOP_WORDS = 3  # the words with the largest weights, named beside each reading
SHADE_CAP = 10.0  # w T from which a token is shaded darkest: ten times the uniform weight
LEGEND = (1.0, 2.0, 5.0, SHADE_CAP)  # the w T values the legend shows
SHADE_RGB = "33, 102, 172"


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


def over_uniform(weight: float, length: int) -> float:
    """w T: the weight against the uniform weight 1/T of a reading of `length` tokens (1: uniform)."""
    return weight * length


def shade(weight: float, length: int) -> float:
    """The token's shade, 0 (none) to 1 (darkest), on one scale for every review and arm: 0 at or below the uniform
    weight, then log(w T) / log(SHADE_CAP), the darkest from SHADE_CAP times uniform on."""
    ratio = over_uniform(weight, length)
    return 0.0 if ratio <= 1.0 else min(1.0, math.log(ratio) / math.log(SHADE_CAP))


def _token(word: str, weight: float, length: int) -> str:
    """A token shaded by shade(); white text on the darkest shades, to stay readable."""
    alpha = shade(weight, length)
    colour = "; color: #fff" if alpha > 0.6 else ""
    return (f"<span class='token' title='weight {weight:.3f}, {over_uniform(weight, length):.1f} x uniform' "
            f"style='background: rgba({SHADE_RGB}, {alpha:.2f}){colour}'>{literal(word)}</span>")


def legend() -> str:
    """The shading scale: a swatch for each value of LEGEND, and what the scale is."""
    swatches = " ".join(_token(f"{ratio:g} x uniform" + (" or more" if ratio == SHADE_CAP else ""), ratio, 1)
                        for ratio in LEGEND)
    return (f"Shading: <span class='legend'>{swatches}</span>. Each token is shaded by its weight w against the "
            "uniform weight 1/T of its review of T tokens: none at or below uniform (w T <= 1), deeper with log(w T) "
            f"above it, the darkest from {SHADE_CAP:g} x uniform. One scale for every review and arm: a pale reading "
            "spreads its attention, a dark token is one it selects. Hover a token in report.html for its weight.")


def _largest(review: ShownReview, reading: Reading) -> str:
    """The prediction and the TOP_WORDS words with the largest weights, each with its weight and w T."""
    length = len(review.words)
    top = np.argsort(-reading.weights, kind="stable")[:TOP_WORDS]
    words = ", ".join(f"{literal(review.words[i])} ({reading.weights[i]:.2f}, "
                      f"{over_uniform(reading.weights[i], length):.1f} x)" for i in top)
    return f"{escape(_prediction(reading, review.num_classes))}; {words}"


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
        length = len(review.words)
        lines += [f"### {escape(_caption(review))}", "", "| embeddings | prediction; largest weights | review |",
                  "|---|---|---|"]
        for arm, reading in review.readings.items():
            shaded = " ".join(_token(word, weight, length)
                              for word, weight in zip(review.words, reading.weights, strict=True))
            lines.append(f"| {arm} | {_largest(review, reading)} | <span class='reading'>{shaded}</span> |")
        lines.append("")
    return "\n".join(lines) + "\n"
