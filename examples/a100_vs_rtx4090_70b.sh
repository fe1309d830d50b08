#!/usr/bin/env bash
# 70B on 256 A100-80GB, or on 2048 RTX 4090? The worked walk-through is a100_vs_rtx4090_70b.md.
# Run from anywhere with paraplan installed (pip install .); PARAPLAN overrides the command,
# e.g. PARAPLAN="python -m paraplan". Every command exits 0.
set -euo pipefail
PARAPLAN=${PARAPLAN:-paraplan}

# 1. The two plans as usually proposed: are they feasible, and how far from the optimum?
$PARAPLAN validate --model llama2-70b --gpus 256 --hardware a100-80g --plan TP8/PP4/DP8
$PARAPLAN validate --model llama2-70b --gpus 2048 --hardware rtx4090 --plan TP2/PP16/DP64

# 2. The decision: the optimizer's best layout per hardware, and 2T tokens on it --
#    time with failures, goodput, energy and money (owned hardware, preset figures).
$PARAPLAN compare --model llama2-70b --hardware a100-80g:256,rtx4090:2048 --tokens 2e12

# 3. The same as one JSON object, for scripts (fields: docs/json.md).
$PARAPLAN compare --model llama2-70b --hardware a100-80g:256,rtx4090:2048 --tokens 2e12 --json

# 4. Rented instead of owned: the cloud price per GPU-hour (energy included in it).
$PARAPLAN compare --model llama2-70b --hardware a100-80g:256,rtx4090:2048 --tokens 2e12 --pricing cloud

# 5. The forum claim "a consumer card fails every 720 hours": 2048 of them, 10-minute restarts.
$PARAPLAN compare --model llama2-70b --hardware rtx4090:2048 --tokens 2e12 --gpu-mtbf-hours 720

# 6. The same cards with hot spares and in-memory checkpoints: a 1-minute restart.
$PARAPLAN compare --model llama2-70b --hardware rtx4090:2048 --tokens 2e12 --gpu-mtbf-hours 720 --restart-s 60
