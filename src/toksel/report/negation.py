"""The report's section on negation in real reviews (ours, exploratory: no claim in the catalogue, no verdict), read
from what the negation stage wrote (results/negation/): each model's accuracy on the negated test reviews and on the
others, how the one-layer models read the negators, and the shortest negated reviews shaded. Its figure is among
the report's figures; the section stands just before the shaded reviews of the embedding arms.
"""

from __future__ import annotations

from pathlib import Path

from toksel.report.document import Block
from toksel.runtime.io import read_json, require_output
from toksel.runtime.paths import results_dir
from toksel.summaries.negation import section

NEGATION = results_dir("negation", "")
HEADING = "Beyond the paper: negation in real reviews"
ABOUT = ("Ours, exploratory: no claim, not counted. The paper's model reads each token through its own score and "
         "value: a negator adds its own value and takes a share of the attention, whatever word it precedes, and "
         "cannot flip that word's value. Stage negation; results/negation/summary.md, and the figure below.")


def negation_block(folder: Path = NEGATION) -> Block:
    """The section: the rule, the accuracy table, the negators' table and the shaded reviews; a note when the stage
    has not run."""
    path = folder / "negation.json"
    if not path.exists():
        return Block(HEADING, ["The negation stage has not run (dvc repro negation)."])
    found = read_json(path, producer="negation")
    shaded = require_output(folder / "examples.md", producer="negation").read_text()
    return Block(HEADING, [ABOUT, *section(found, shaded, "###")])
