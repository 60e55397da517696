"""toksel: the pipeline that reproduces and checks "Attention with Trained Embeddings Provably Selects Important
Tokens"."""

import os

# OpenMP threads that finish early sleep instead of spinning: a spinning thread steals the core that a busy neighbour
# (another process, the other half of a parallel pass) needs. Measured on a full-batch pass of 128k entries with one
# core taken by another process: 7.5 ms passive against 11-12 ms spinning; on a quiet machine both 4.7 ms, and
# Lightning's training step the same (29 steps/s). Read when the OpenMP library loads, so set before any import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
