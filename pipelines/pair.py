"""Stage `pair`: the ablations' training (pipelines/ablation.py) on the pair datasets, pair.dataset and its control
pair.control, each variant of pair.variants, every training seed, into results/pair/<dataset>/<variant>/; each
run also records its accuracy on the test sequences that carry a pair (pair_accuracy)."""

from __future__ import annotations

import sys

from pipelines import ablation


def main(argv: list[str] | None = None) -> int:
    return ablation.main(argv, stage="pair")


if __name__ == "__main__":
    sys.exit(main())
