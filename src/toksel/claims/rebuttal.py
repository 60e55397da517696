"""The rebuttal's binned tables (from the authors' rebuttal) and how the shapes of our curves compare with them.

Each table gives, per bin of x, the mean of a token score over the tokens in the bin. Scales depend on how long
and how a model was trained, so only shapes are compared: our bin means are read at the table's x positions
inside the range our kept bins cover (no extrapolation) and ranked against the table's values (Spearman), and
the x of the lowest bin (the bottom of the U of the <cls> score) is set beside the table's. The comparison
describes; the claims themselves are judged per token (toksel.claims.catalogue). Both x axes are on one scale: the
posterior difference for the binary tables; for the 4-class tables, whose x spans +-0.03, the class-k
document frequency (a class-k signed frequency counting each review once, without the 1/T of the one-step
formula, which puts it near +-0.003).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

_BINARY_X = (-0.95, -0.85, -0.76, -0.66, -0.56, -0.47, -0.37, -0.28, -0.18, -0.08, 0.01, 0.11, 0.21, 0.30, 0.40,
             0.50, 0.59, 0.69, 0.79, 0.89)


@dataclass(frozen=True)
class Table:
    name: str
    title: str  # what the table shows, as the rebuttal labels it
    x: tuple[float, ...]
    means: tuple[float, ...]
    score: str  # our curve it is set against: "p" (the <cls> score) or "v"; multi-class "v_class_<k>"
    model: str  # our run: a sequence.variant of the ablation stage, or "multiclass" (train, embeddings trained)
    reading: str  # the table's shape, as the rebuttal reads it


TABLES = (
    Table("mlp_v", "MLP: E_s^T v", _BINARY_X,
          (.13, .24, .06, .09, .04, .10, .01, .04, -.01, .03, .06, .11, .18, .24, .34, .44, .57, .72, .87, 1.40),
          # against the residual MLP: without the residual, v reads ReLU features and E_s^T v is no property of s
          "v", "mlp_residual", "increasing on the positive side, not monotone on the negative side"),
    Table("mlp_p", "MLP: E_s^T p", _BINARY_X,
          (4.76, 4.61, 3.26, 3.08, 2.80, 2.06, 1.60, 1.43, .89, .67, .59, .71, 1.11, 1.61, 2.02, 2.30, 3.28, 3.39,
           4.84, 6.10), "p", "mlp", "V-shaped, lowest (0.59) at x = 0.01"),
    Table("kq_p", "2-layer + W_KQ: p^T W_KQ^(2) E_s", _BINARY_X,
          (15.47, 7.37, 7.79, 4.64, 3.68, 1.60, .68, -.61, -2.22, -2.80, -3.92, -3.18, -2.23, -1.43, -.15, .29,
           3.21, 2.98, 7.90, 12.44), "p", "two_layer_kq",
          "U-shaped, lowest (-3.92) at x = 0.01"),
    Table("kq_v", "2-layer + W_KQ: E_s^T v", _BINARY_X,
          (-1.07, -1.14, -.82, -.69, -.58, -.65, -.53, -.44, -.18, -.13, .01, .11, .26, .39, .54, .63, .81, .73, .61,
           .93), "v", "two_layer_kq", "increasing, as in Figure 1"),
    # 4-class Yelp; the rebuttal numbers the classes 1-4 [I], so its class 2 is our class 1 (2 stars) and its
    # class 4 our class 3 (5 stars).
    Table("class2_v", "4 classes: E_s^T v_2", (
        -.026, -.020, -.017, -.014, -.011, -.008, -.005, -.002, .001, .005, .008, .011, .014, .017, .020, .023,
        .026, .029, .032), (
        -42.375, -27.306, -51.164, -20.713, -40.923, -41.925, -41.884, -35.691, 18.255, 35.633, 30.524, 56.211,
        44.184, 23.280, 45.341, 43.210, 62.935, 81.274, 53.548), "v_class_1", "multiclass",
        "increasing, with a jump in sign at x = 0"),
    Table("class4_v", "4 classes: E_s^T v_4", (
        -.021, -.018, -.016, -.014, -.011, -.009, -.007, -.004, -.002, .000, .002, .005, .007, .009, .012, .014,
        .016, .019, .021), (
        -64.776, -66.074, -37.040, -32.499, -31.109, -30.686, -26.341, -23.153, -22.310, -0.648, 31.915, 27.601,
        30.951, 29.300, 19.455, 29.693, 41.506, 34.151, 21.060), "v_class_3", "multiclass",
        "increasing, with a jump in sign at x = 0"),
)


@dataclass(frozen=True)
class ShapeAgreement:
    spearman: float  # of our bin means (read at the table's x) with the table's
    our_min_x: float  # x of our lowest bin mean, on our axis
    their_min_x: float
    bins_compared: int  # the table's bins inside the x range of ours


def shape_agreement(table: Table, centres: np.ndarray, means: np.ndarray) -> ShapeAgreement:
    filled = np.isfinite(means)
    ours_x, theirs_x = centres[filled], np.asarray(table.x)
    inside = (theirs_x >= ours_x.min()) & (theirs_x <= ours_x.max())
    ours = np.interp(theirs_x[inside], ours_x, means[filled])  # our bin means, linearly between our centres
    enough = inside.sum() >= 3
    from scipy.stats import spearmanr  # here: scipy.stats takes half a second to import

    return ShapeAgreement(
        spearman=float(spearmanr(ours, np.asarray(table.means)[inside]).statistic) if enough else float("nan"),
        our_min_x=float(centres[filled][np.argmin(means[filled])]),
        their_min_x=float(table.x[int(np.argmin(table.means))]),
        bins_compared=int(inside.sum()),
    )


def compare_with_tables(bins_by_run: dict[tuple[str, str], pd.DataFrame],
                        min_spearman: float) -> tuple[pd.DataFrame, list[tuple]]:
    """Every table against each run of its model: bins_by_run maps (run name, model) to that run's bins.csv
    (model: a sequence.variant, or "multiclass"). A run without the table's curve (fewer classes) is skipped.

    Returns one row per (table, run) -- Spearman, lowest bin x ours and theirs, bins compared, whether it agrees
    -- and (table, run name, our centres, our means) for the figure.
    """
    rows, curves = [], []
    for table in TABLES:
        for (name, model), bins in bins_by_run.items():
            if model != table.model or f"centre_{table.score}" not in bins:
                continue
            centres, means = bins[f"centre_{table.score}"].to_numpy(), bins[f"mean_{table.score}"].to_numpy()
            agreement = shape_agreement(table, centres, means)
            rows.append({"table": table.name, "title": table.title, "dataset": name, "model": model,
                         "spearman": agreement.spearman, "our_min_x": agreement.our_min_x,
                         "their_min_x": agreement.their_min_x, "bins_compared": agreement.bins_compared,
                         "agrees": agreement.spearman >= min_spearman})
            curves.append((table, name, centres, means))
    return pd.DataFrame(rows), curves
