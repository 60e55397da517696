"""Verdicts calibrated against known answers: each claim family's statistic and verdict rule, run as the claims
run them, on replicates where the answer is known.

- rates.py: how often a verdict rule holds over replicates, with Wilson's interval.
- theory.py: the one step and the gradient flow on small synthetic data whose labels keep all, half or none of
  their signal, and the flow with a bounded |p_t|.
- curves.py: token scores planted on a dataset's own token statistics, redrawn per seed (the measurement noise
  of its held-out statistics), for the curve, rank and spread families; the arms' test accuracy
  gaps with the between-seed spread of our runs' gaps (heavy-tailed), for the accuracy gap.
- families.py: which claim's rule each family calibrates, on which known answers, and the stage's table.
"""
