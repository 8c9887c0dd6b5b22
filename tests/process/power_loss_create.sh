#!/usr/bin/env bash
# A broker whose host loses power while it creates its store opens again: for each of its first
# syncs, gryph-broker (PHB) runs with the I/O shim preloaded and kills itself at that sync, its
# writes not yet durable are reverted (all of them, or sector by sector: gryph_power_cut), and
# it must then start on the same directory and stop cleanly. LMDB writes a new data file's first
# pages without a sync, so without the staged creation of a store (lmdb_storage.cc,
# CreateIfAbsent) a cut before the first commit leaves a data file of zeros that no open accepts.
#
# Usage: power_loss_create.sh BIN_DIR SHIM_DIR
#   BIN_DIR holds gryph-broker; SHIM_DIR libgryph_io_shim.so and gryph_power_cut.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

bin=$1
shim=$2
process_test_init power-loss-create
declare -A listen_of=([phb]="tcp://127.0.0.1:*")
common=(--stats_interval=5s)
cuts=0
for at in 1 2 3 4; do
  for mode in lose_all sectors; do
    rm -rf "$dir/phb" "$dir/phb.undo" "$dir/phb.log"
    LD_PRELOAD="$shim/libgryph_io_shim.so" GRYPH_IO_JOURNAL="$dir/phb.undo" \
      GRYPH_IO_KILL_AT_SYNC=$at start_broker phb
    track phb
    # It dies at the sync, or (fewer syncs than that) runs on: then it is killed at 1 s.
    for _ in $(seq 10); do kill -0 "${pid_of[phb]}" 2>/dev/null || break; sleep 0.1; done
    kill -9 "${pid_of[phb]}" 2>/dev/null || true
    wait "${pid_of[phb]}" 2>/dev/null || true
    forget "${pid_of[phb]}"
    "$shim/gryph_power_cut" --journal="$dir/phb.undo" --seed="$at" --mode="$mode" >/dev/null
    cuts=$(( cuts + 1 ))
    : >"$dir/phb.log"
    start_broker phb
    track phb
    endpoint_of "$dir/phb.log" >/dev/null ||
      fail "the PHB did not start after a power cut at its sync $at ($mode)"
    stop phb
  done
done
echo "power loss at store creation: $cuts cuts, every store opened again"
