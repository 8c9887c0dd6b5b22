#!/usr/bin/env bash
# Runs the end-to-end simulation tests over many seeds (default 10,000 per topology).
#   tests/simulation/run_many_seeds.sh [SEEDS] [BUILD_DIR]
# A failure prints the seed; rerun it alone with GRYPH_SEED=<seed> (and GRYPH_SIM_VERBOSE=1 for
# a trace of every subscriber's messages).
set -euo pipefail
seeds=${1:-10000}
build=${2:-$(cd "$(dirname "$0")/../.." && pwd)/build}
cmake --build "$build" --target gryph_tests >/dev/null
time GRYPH_SIM_SEEDS="$seeds" "$build/tests/gryph_tests" "[simulation]"
