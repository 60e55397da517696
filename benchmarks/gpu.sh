#!/usr/bin/env bash
# The GPU benchmark (benchmarks/gpu.py says what it measures), on a machine with one GPU, from the repository root:
#
#   benchmarks/gpu.sh --pack            here, before: .gpu/ gets the data mirror and, as wheels for Python 3.12, the
#                                       packages a bare GPU image lacks (pydantic, omegaconf and theirs)
#   benchmarks/gpu.sh [PARTS...]        there: default train yelp imdb_ablation steps, within GPU_BUDGET_S seconds
#                                       (480); the table goes to benchmarks/results.md and, with $OUT set, to $OUT
#
# All four parts at their targets take about 11 minutes, so a 15-minute lease makes two calls: `train yelp`, then
# `imdb_ablation steps` (a part the budget cuts says so in the table). With the device tool: carry .gpu, run
# `bash benchmarks/gpu.sh PARTS`, then append $OUT/gpu.md to benchmarks/results.md here and keep
# $OUT/gpu-steps.json as benchmarks/logs/gpu-<date>.json (the cost model's GPU columns read it).
set -euo pipefail
cd "$(dirname "$0")/.."
PACKED=.gpu
# What the GPU image lacks (checked against its package list): the settings' schema, the config reader and theirs.
WHEELS="pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 omegaconf==2.3.1"

if [[ "${1:-}" == "--pack" ]]; then
    mirror=${TOKSEL_DATA_MIRROR:?set TOKSEL_DATA_MIRROR to the data mirror to copy}
    rm -rf "$PACKED" && mkdir -p "$PACKED/wheels" "$PACKED/data"
    cp -r "$mirror"/imdb "$mirror"/yelp_polarity "$mirror"/README.md "$PACKED/data/"
    # pydantic-core and the rest as cp312 manylinux wheels; antlr4's runtime has no wheel: built here (pure Python)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$PACKED/wheels" $WHEELS
    python3 -m pip wheel -q --no-deps -w "$PACKED/wheels" antlr4-python3-runtime==4.9.3
    du -sh "$PACKED"
    exit 0
fi

if [[ -d "$PACKED/wheels" ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/toksel-site \
        "$PACKED"/wheels/*.whl
    export PYTHONPATH=/tmp/toksel-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export TOKSEL_DATA_MIRROR=${TOKSEL_DATA_MIRROR:-$PWD/$PACKED/data} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export PYTHONUNBUFFERED=1 TOKSEL_PROGRESS=0
parts=("$@")
exec python3 -m benchmarks.gpu --budget "${GPU_BUDGET_S:-480}" --out "${OUT:-benchmarks/gpu-out}" \
    ${parts[@]:+--parts "${parts[@]}"}
