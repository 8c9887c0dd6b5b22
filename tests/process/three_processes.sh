#!/usr/bin/env bash
# A PHB (with its publishing application), an SHB and a durable subscriber as three processes
# on loopback, over the ZeroMQ channel with CURVE. While events flow, each process in turn is
# SIGKILLed at a random instant and restarted; afterwards the subscriber's store must hold
# every matching event of the pubends' logs exactly once, in order, and the logs every
# published event exactly once.
#
# Usage: three_processes.sh PATH/TO/gryph_process_node. GRYPH_SEED=<n> replays one run's
# instants; GRYPH_KEEP=1 keeps the run's directory (stores and logs).
set -euo pipefail

node=$1
seed=${GRYPH_SEED:-$$}
RANDOM=$seed
echo "seed $seed (rerun with GRYPH_SEED=$seed)"

dir=$(mktemp -d "${TMPDIR:-/tmp}/gryph-three-processes-XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${GRYPH_KEEP:-}" ]; then echo "kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

events=4000
selector="k < 5"
"$node" --role=keygen --keys_dir="$dir/keys" --names=phb,shb,sub

declare -A pid_of
# The live processes: each started one, until it is killed.
forget() { local keep=(); for p in "${pids[@]}"; do [ "$p" != "$1" ] && keep+=("$p"); done; pids=("${keep[@]}"); }
start() {
  local role=$1
  case $role in
    phb) "$node" --role=phb --name=phb --keys_dir="$dir/keys" --data_dir="$dir/phb" \
           --endpoint_file="$dir/phb.endpoint" --allowed=shb --downstream=shb \
           --events=$events --rate=400 --start_file="$dir/sub.connected" \
           2>>"$dir/phb.log" & ;;
    shb) "$node" --role=shb --name=shb --keys_dir="$dir/keys" --data_dir="$dir/shb" \
           --endpoint_file="$dir/shb.endpoint" --allowed=sub \
           --upstream="phb@$(cat "$dir/phb.endpoint")" 2>>"$dir/shb.log" & ;;
    sub) "$node" --role=sub --name=sub --keys_dir="$dir/keys" --data_dir="$dir/sub" \
           --broker="shb@$(cat "$dir/shb.endpoint")" --selector="$selector" \
           --connected_file="$dir/sub.connected" 2>>"$dir/sub.log" & ;;
  esac
  pid_of[$role]=$!
  pids+=($!)
}

# Waits (at most 30 s) for a file a node writes.
await_file() {
  for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "timed out waiting for $1" >&2
  return 1
}

# Random sleep of $1 to $2 seconds (tenths).
nap() { sleep "$(( $1 + RANDOM % ($2 - $1 + 1) ))e-1"; }

fail() {
  echo "FAILED: $*" >&2
  for f in "$dir"/*.log; do echo "--- $f"; tail -20 "$f"; done >&2
  exit 1
}

start phb
await_file "$dir/phb.endpoint"
start shb
await_file "$dir/shb.endpoint"
start sub
await_file "$dir/sub.connected"  # then the application publishes

# Two rounds: each process killed twice, one at a time.
for role in sub shb phb shb sub phb; do
  nap 8 15
  kill -0 "${pid_of[$role]}" 2>/dev/null || fail "$role exited by itself"
  echo "SIGKILL $role"
  kill -9 "${pid_of[$role]}"
  wait "${pid_of[$role]}" 2>/dev/null || true
  forget "${pid_of[$role]}"
  nap 2 8
  start "$role"
done

# Every event acknowledged by the PHB (at most 60 s), then the subscriber has them all.
for _ in $(seq 600); do [ -e "$dir/phb/published" ] && break; sleep 0.1; done
[ -e "$dir/phb/published" ] || fail "the publisher did not get every event acknowledged"
"$node" --role=check --phb_dir="$dir/phb" --sub_dir="$dir/sub" --selector="$selector" \
  --events=$events --wait=60 || fail "exactly-once check"

# A clean stop: SIGTERM, and each exits 0.
for role in sub shb phb; do
  kill -TERM "${pid_of[$role]}"
  wait "${pid_of[$role]}" || fail "$role did not exit cleanly on SIGTERM"
done
pids=()
echo "ok"
