"""The names of the training protocols a claim is measured under, and of the columns grid.csv gives each one.

They are the vocabulary shared by the training stage that writes the runs, the measurements that read them, the
report's sensitivity table and the ledger's old verdicts; measurements.py says what each protocol is.
"""

MATCHED = "matched lr"  # every arm at one rate, train.lr, within train.matched_max_epochs
TUNED = "tuned lr"  # each arm at the screened rate that converges to the lowest validation loss: the rule in force
EQUAL = "equal steps"  # every arm at its tuned rate after the same train.screen_epochs epochs
THEORY = "theory protocol"  # E frozen at E1, v at v0, p from gradient_flow
SCREENED = "screened lr"  # each arm at its screen's own choice, trained to convergence: the rule before TUNED
SCREEN_PREFIX = "screen_"  # a rate's metrics after the screen in grid.csv (training/protocol.py writes them)
CONVERGED_PREFIX = "converged_"  # a candidate rate's metrics trained to convergence, in grid.csv
