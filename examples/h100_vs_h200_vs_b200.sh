#!/usr/bin/env bash
# Llama 3 70B on 15T tokens: H100, H200 or B200? The walk-through is h100_vs_h200_vs_b200.md.
# Run from anywhere with paraplan installed (pip install .); PARAPLAN overrides the command,
# e.g. PARAPLAN="python -m paraplan". Every command exits 0.
set -euo pipefail
PARAPLAN=${PARAPLAN:-paraplan}

# 1. The same 1024 GPUs of each: best layout, time, failures, energy and money (owned).
$PARAPLAN compare --model llama3-70b --hardware h100-sxm:1024,h200:1024,b200:1024 --tokens 15e12

# 2. Rented at the presets' cloud prices instead.
$PARAPLAN compare --model llama3-70b --hardware h100-sxm:1024,h200:1024,b200:1024 --tokens 15e12 --pricing cloud

# 3. Let the optimizer pick the count: the cheapest run of at most 2048 GPUs that finishes
#    within 90 days, failures included, checked against an $8M budget.
$PARAPLAN compare --model llama3-70b --hardware h100-sxm:2048,h200:2048,b200:2048 --tokens 15e12 \
    --deadline-days 90 --budget-usd 8e6 --json
