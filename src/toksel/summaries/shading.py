"""A review as a model reads it, in Markdown with inline HTML: every token shaded by its attention weight, the
prediction and the largest weights beside it. The report's section of real reviews (report/readings.py) and the
negation stage's shaded reviews write it alike; `python -m toksel.explain` draws the same scale as bars.

The shade is one scale for every review and model: the weight w against the uniform weight 1/T of a review of T
tokens, w T. A token at or below uniform (w T <= 1) is not shaded; above it the shade deepens with log(w T), the
darkest from SHADE_CAP times uniform on. A near-uniform reading thus stays pale however its largest weight
compares with the rest, and a peaked one is dark on the few tokens it selects.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from toksel.models.reading import Reading
from toksel.summaries.markdown import escape, literal

TOP_WORDS = 3  # the words with the largest weights, named beside each reading
SHADE_CAP = 10.0  # w T from which a token is shaded darkest: ten times the uniform weight
LEGEND = (1.0, 2.0, 5.0, SHADE_CAP)  # the w T values the legend shows
SHADE_RGB = "33, 102, 172"
MARK = "; border-bottom: 2px solid #d73027"  # a token a caller points out (a negation), underlined in red


def class_name(k: int, num_classes: int) -> str:
    return ("negative", "positive")[k] if num_classes == 2 else f"class {k}"


def over_uniform(weight: float, length: int) -> float:
    """w T: the weight against the uniform weight 1/T of a reading of `length` tokens (1: uniform)."""
    return weight * length


def shade(weight: float, length: int) -> float:
    """The token's shade, 0 (none) to 1 (darkest), on one scale for every review and arm: 0 at or below the uniform
    weight, then log(w T) / log(SHADE_CAP), the darkest from SHADE_CAP times uniform on."""
    ratio = over_uniform(weight, length)
    return 0.0 if ratio <= 1.0 else min(1.0, math.log(ratio) / math.log(SHADE_CAP))


def shaded_token(word: str, weight: float, length: int, marked: bool = False) -> str:
    """A token shaded by shade(); white text on the darkest shades, to stay readable; underlined when marked."""
    alpha = shade(weight, length)
    colour = "; color: #fff" if alpha > 0.6 else ""
    return (f"<span class='token' title='weight {weight:.3f}, {over_uniform(weight, length):.1f} x uniform' "
            f"style='background: rgba({SHADE_RGB}, {alpha:.2f}){colour}{MARK if marked else ''}'>{literal(word)}"
            "</span>")


def legend() -> str:
    """The shading scale: a swatch for each value of LEGEND, and what the scale is."""
    swatches = " ".join(shaded_token(f"{ratio:g} x uniform" + (" or more" if ratio == SHADE_CAP else ""), ratio, 1)
                        for ratio in LEGEND)
    return (f"Shading: <span class='legend'>{swatches}</span>. Each token is shaded by its weight w against the "
            "uniform weight 1/T of its review of T tokens: none at or below uniform (w T <= 1), deeper with log(w T) "
            f"above it, the darkest from {SHADE_CAP:g} x uniform. One scale for every review and arm: a pale reading "
            "spreads its attention, a dark token is one it selects. Hover a token in report.html for its weight.")


def _prediction(reading: Reading, num_classes: int) -> str:
    k = reading.predicted
    return f"{class_name(k, num_classes)} ({reading.probabilities[k]:.2f})"


def _largest(words: Sequence[str], reading: Reading, num_classes: int) -> str:
    """The prediction and the TOP_WORDS words with the largest weights, each with its weight and w T."""
    length = len(words)
    top = np.argsort(-reading.weights, kind="stable")[:TOP_WORDS]
    named = ", ".join(f"{literal(words[i])} ({reading.weights[i]:.2f}, "
                      f"{over_uniform(reading.weights[i], length):.1f} x)" for i in top)
    return f"{escape(_prediction(reading, num_classes))}; {named}"


def reading_table(words: Sequence[str], readings: Mapping[str, Reading], num_classes: int, column: str = "embeddings",
                  marked: Collection[int] = ()) -> list[str]:
    """The lines of a table with a row per model (`column` names what tells them apart): its prediction, its
    largest weights and the review with every token shaded (report.html shows the shades, report.md the words);
    the positions `marked` underlined."""
    length = len(words)
    lines = [f"| {column} | prediction; largest weights | review |", "|---|---|---|"]
    for name, reading in readings.items():
        shaded = " ".join(shaded_token(word, weight, length, position in marked)
                          for position, (word, weight) in enumerate(zip(words, reading.weights, strict=True)))
        lines.append(f"| {name} | {_largest(words, reading, num_classes)} | <span class='reading'>{shaded}</span> |")
    return lines
