#!/usr/bin/env bash
# Syscall-exact I/O faults (#17, campaign 2): for each broker (PHB, SHB), each operation (the
# data file's syncs, its writes) and each mode (transient: the k-th call fails; persistent: every
# call from the k-th on), k runs upward until the workload completes without reaching the k-th
# call. In each run the I/O shim (tests/campaigns/io_shim.cc) fails that call with EIO (a
# transient one with ENOSPC in one run in two: a full disk, which the PHB answers with
# RESOURCE_EXHAUSTED and outlives, and the SHB waits out) in the broker under test. A broker that exits must exit 1 or 2
# and say why; it is then restarted without the fault (the disk replaced, or the error gone). The
# publisher must end with every event acknowledged, and the subscriber's file hold every match
# once in tick order: nothing acknowledged was lost, nothing delivered twice.
#
# Usage: io_faults.sh BIN_DIR SHIM_DIR [ROLES [all]]
#   BIN_DIR holds gryph-broker, gryph-pub and gryph-sub; SHIM_DIR libgryph_io_shim.so. ROLES is
#   "phb,shb" (the default), "phb" or "shb". Without "all", k takes the values 1, 2, 3, 5, 8,
#   13, ... (each the sum of the two before); with it, every value. GRYPH_SEED=<n> replays a
#   run's choices; GRYPH_KEEP=1 keeps its directory.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

bin=$1
shim=$2
IFS=, read -r -a roles <<<"${3:-phb,shb}"
every=${4:-}
process_test_init io-faults
events=200
declare -A listen_of
common=(--stats_interval=2s)
runs=0
exits=0     # brokers that exited on an injected error (and were restarted)
injected=0  # calls failed

start() {
  local role=$1
  shift
  case $role in
    phb | shb)
      local kv
      for kv in "$@"; do export "${kv?}"; done
      LD_PRELOAD="$shim/libgryph_io_shim.so" start_broker "$role"
      for kv in "$@"; do unset "${kv%%=*}"; done ;;
    sub) "$bin/gryph-sub" --broker="shb@${listen_of[shb]}" --name=sub --subscription=sub \
           --selector="k < 5" --state_dir="$dir/sub" --out="$dir/sub.jsonl" "${common[@]}" \
           2>>"$dir/sub.log" & ;;
    pub) "$bin/gryph-pub" --phb="phb@${listen_of[phb]}" --name=pub --state_dir="$dir/pub" \
           --rate=400 --count=$events "${common[@]}" 2>>"$dir/pub.log" & ;;
  esac
  track "$role"
}

# One run of the workload with the fault in `role`; sets `reached` to 1 if the fault was hit.
run() {
  local role=$1 fault=$2 k=$3 persistent=$4 error=$5
  rm -rf "$dir/phb" "$dir/shb" "$dir/sub" "$dir/pub" "$dir"/*.log "$dir/sub.jsonl" "$dir/faults"
  listen_of=([phb]="tcp://127.0.0.1:*" [shb]="tcp://127.0.0.1:*")
  local -a env_phb=() env_shb=()
  local -a faulty=("GRYPH_IO_$fault=$k" "GRYPH_IO_PERSISTENT=$persistent" "GRYPH_IO_ERRNO=$error"
                   "GRYPH_IO_FAULT_LOG=$dir/faults")
  if [ "$role" = phb ]; then env_phb=("${faulty[@]}"); else env_shb=("${faulty[@]}"); fi
  local endpoint
  start phb "${env_phb[@]}"
  if endpoint=$(endpoint_of "$dir/phb.log"); then listen_of[phb]=$endpoint; else started_late phb; fi
  start shb "${env_shb[@]}"
  if endpoint=$(endpoint_of "$dir/shb.log"); then listen_of[shb]=$endpoint; else started_late shb; fi
  start sub
  for _ in $(seq 300); do  # 30 s: an unanswered connection request is repeated after 10 s
    grep -q "connected to" "$dir/sub.log" && break
    sleep 0.1
    tend "$role"
  done
  grep -q "connected to" "$dir/sub.log" || fail "the subscriber did not connect"
  start pub
  for _ in $(seq 600); do  # 60 s
    sleep 0.1
    tend "$role"
    kill -0 "${pid_of[pub]}" 2>/dev/null || break
  done
  await_exit pub 10
  # The broker under test may still fail (the subscriber's acks commit after the last event).
  for _ in $(seq 600); do
    matches_verdict "$dir/sub.jsonl" $(( events / 2 )) "s % 10 < 5" && break
    sleep 0.1
    tend "$role"
  done
  tend "$role"
  check_matches "$dir/sub.jsonl" $(( events / 2 )) "s % 10 < 5" >/dev/null
  # No retention policy here: a Gap would be an acknowledged event lost to the subscriber.
  if grep -q '"gap"' "$dir/sub.jsonl"; then
    fail "the subscriber got a Gap ($role ${fault#FAIL_} at k = $k): $(grep '"gap"' "$dir/sub.jsonl")"
  fi
  for r in sub shb phb; do
    if [ "$r" = "$role" ]; then stop_tested "$r"; else stop "$r"; fi
  done
  runs=$(( runs + 1 ))
  reached=0
  if [ -s "$dir/faults" ]; then reached=1; injected=$(( injected + $(wc -l <"$dir/faults") )); fi
}

# Stops the broker under test, which may have failed on an injected error meanwhile (a late
# commit): then its exit must say so, as in broker_exited.
stop_tested() {
  local code=0
  kill -TERM "${pid_of[$1]}" 2>/dev/null || true
  wait "${pid_of[$1]}" || code=$?
  forget "${pid_of[$1]}"
  [ "$code" = 0 ] && return 0
  [ -s "$dir/faults" ] || fail "$1 did not exit cleanly on SIGTERM (exit $code)"
  [ "$code" = 1 ] || [ "$code" = 2 ] || fail "$1 exited with $code after the fault, not 1 or 2"
  exits=$(( exits + 1 ))
}

# Restarts the broker under test if it exited (on the injected error).
tend() {
  kill -0 "${pid_of[$1]}" 2>/dev/null && return 0
  broker_exited "$1"
  start "$1"
  endpoint_of "$dir/$1.log" >/dev/null || fail "$1 did not restart"
}

# The broker under test failed at its open (the staging store's first sync, say): it must have
# said so; it is started again without the fault.
started_late() {
  broker_exited "$1"
  start "$1"
  local endpoint
  endpoint=$(endpoint_of "$dir/$1.log") || fail "$1 did not start after its failed open"
  listen_of[$1]=$endpoint
}

# The broker exited by itself: after an injected fault, with a reason on stderr.
broker_exited() {
  local code=0
  wait "${pid_of[$1]}" || code=$?
  forget "${pid_of[$1]}"
  [ "$code" = 1 ] || [ "$code" = 2 ] || fail "$1 exited with $code after the fault, not 1 or 2"
  grep -qi "input/output error\|no space\|EIO\|ENOSPC\|MDB_PANIC\|failed" "$dir/$1.log" ||
    fail "$1 exited without saying why"
  exits=$(( exits + 1 ))
}

for role in "${roles[@]}"; do
  for fault in FAIL_SYNC FAIL_WRITE; do
    for persistent in 0 1; do
      a=1 b=1 k=1
      while :; do
        error=EIO
        if [ "$persistent" = 0 ] && (( RANDOM % 2 == 0 )); then error=ENOSPC; fi
        run "$role" "$fault" "$k" "$persistent" "$error"
        [ "$reached" = 1 ] || break
        if [ "$every" = all ]; then k=$(( k + 1 )); else k=$(( a + b )); a=$b; b=$k; fi
        [ "$k" -le 100000 ] || fail "k passed 100,000 without the workload completing untouched"
      done
      echo "$role ${fault#FAIL_} $([ "$persistent" = 1 ] && echo persistent || echo transient):" \
           "the workload untouched at k = $k"
    done
  done
done
echo "I/O faults: $runs runs, $injected calls failed, $exits broker exits (each restarted);" \
     "every run exactly once, nothing acknowledged lost"
