"""What the ledger cannot read from results/ or the claims' fields: the values set after numbers were seen that
results/ does not hold (a pilot run, a benchmark log, a note), and a rule's values that lived in code before the
claims had a field for them (`Coded`).

The ledger (ledger.py) finds a rule changed after the data when a tracked file under results/ named its claim
before the commit that set it. A pilot leaves no such trace, so each is written down here with what was seen and
where that is told, and the ledger counts every rule component a pilot names as changed after the data, whatever
results/ held. A pilot names params.yaml keys; it names a component that reads such a key or a dataset's override of
it (datasets.<name>.<key>; a claim's threshold value reads the key its `threshold` names). A key no component
matches is refused by the tests: a pilot written down for nothing would look like one counted.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pilot:
    keys: tuple[str, ...]  # the params.yaml keys whose values were set after it
    seen: str  # the numbers seen before they were set
    source: str  # where that is told

    def names(self, read: str) -> bool:
        """Whether this pilot set the params.yaml key `read` (a rule component's key), or a dataset's override of
        one of its keys."""
        return any(read == key or (read.startswith("datasets.") and read.endswith(f".{key}")) for key in self.keys)


NOTES = "docs/paper-notes.md"
PILOTS: tuple[Pilot, ...] = (
    Pilot(("pair.past_cap",), "the one-layer model read 0.75 of the pair sequences on four pilot seeds and 0.5 on the "
          "fifth, hence a boundary half way from the cap 3/4 to 1 rather than the cap",
          f"{NOTES} (the pair of tokens)"),
    Pilot(("datasets.synthetic_pair.train.lr", "datasets.synthetic_pair_first_order.train.lr"),
          "at the ablations' rate 1e-3 three of five pilot MLP fits stopped on the loss's first plateau (epoch 4, "
          "validation loss 0.69), hence the pair datasets' rate 0.01", f"{NOTES} (the pair of tokens); params.yaml"),
    Pilot(("margins.horizon",), "the pilot l_1.5 flow on seed 0 at cosine 0.986 with its own solution at t = 1e10 "
          "and 0.990 at 1e14, hence the horizon 1e16", f"{NOTES} (which margin an optimiser picks); params.yaml"),
    Pilot(("train.converged_candidates",), "a referee's fits: yelp_polarity's trained arm kept at 0.01 by its 3-epoch "
          "screen (test accuracy 0.911) where 1e-3 trained to convergence reached 0.928, yelp_stars4's 0.586 against "
          "0.616, hence each arm's choice among the screen's best two by converged validation loss",
          "src/toksel/training/protocol.py (its docstring)"),
    Pilot(("margins.potentials",), "the pilot's l_2 direction at cosine 0.94 with the l_1.5 one, 0.97 with the l_3 "
          "one and 0.93 with the l_4 one on seed 0, hence [1.5, 4]", f"{NOTES} (which margin an optimiser picks)"),
)


@dataclass(frozen=True)
class Coded:
    """A rule component's value held in code before the claims had a field for it: from the commit `since` (a
    short hash; the oldest first), the claims `claims` were judged under `value` wherever their field was unset."""

    component: str  # the claim field, e.g. protocol
    claims: tuple[str, ...]
    since: str
    value: str
    where: str  # the code that held it


COMPARED = ("accuracy_gap", "accuracy_gap_size", "spread_ratio_v", "spread_ratio_v_size", "spread_ratio_p",
            "spread_ratio_p_size", "v_increasing", "p_u_shape", "multiclass_v_increasing")
CODED: tuple[Coded, ...] = (
    Coded("protocol", COMPARED, "3b140b8", "tuned lr (each arm's kept fit)",
          "pipelines/compare.py read dataset_runs(arms=True)"),
    Coded("protocol", COMPARED, "7abfcc1", "matched lr (every arm at train.lr)",
          "toksel/measurements.py read grid_runs(MATCHED)"),
)
