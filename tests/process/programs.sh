#!/usr/bin/env bash
# The programs as an operator runs them, on loopback with CURVE: gryph-broker as PHB and SHB,
# gryph-pub generating events, gryph-sub writing the matches to a file. While events flow, each
# process in turn is SIGKILLed at a random instant and restarted with the same flags; afterwards
# the subscriber's file must hold every matching event exactly once, in tick order, and the
# publisher must have exited 0 (every event acknowledged).
#
# Usage: programs.sh BIN_DIR (holding gryph-broker, gryph-pub, gryph-sub, gryph-inspect).
# GRYPH_SEED=<n> replays one run's instants; GRYPH_KEEP=1 keeps the run's directory.
set -euo pipefail

bin=$1
seed=${GRYPH_SEED:-$$}
RANDOM=$seed
echo "seed $seed (rerun with GRYPH_SEED=$seed)"

dir=$(mktemp -d "${TMPDIR:-/tmp}/gryph-programs-XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${GRYPH_KEEP:-}" ]; then echo "kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

fail() {
  echo "FAILED: $*" >&2
  for f in "$dir"/*.log; do echo "--- $f"; tail -20 "$f"; done >&2
  exit 1
}

events=2000
for n in phb shb pub sub; do
  "$bin/gryph-broker" --genkey --name=$n --keys_dir="$dir/keys" >/dev/null
done

# A port of its own for each broker, kept across restarts: bind port 0 once, read it back.
endpoint_of() {
  local log=$1
  for _ in $(seq 100); do
    local e
    e=$(sed -n 's/.* listening on \(tcp:[^ ]*\) .*/\1/p' "$log" | head -1)
    [ -n "$e" ] && { echo "$e"; return 0; }
    sleep 0.1
  done
  return 1
}

declare -A pid_of listen_of
listen_of[phb]="tcp://127.0.0.1:*"
listen_of[shb]="tcp://127.0.0.1:*"
forget() { local keep=(); for p in "${pids[@]}"; do [ "$p" != "$1" ] && keep+=("$p"); done; pids=("${keep[@]}"); }
start() {
  local role=$1
  case $role in
    phb) "$bin/gryph-broker" --role=phb --data_dir="$dir/phb" --listen="${listen_of[phb]}" \
           --downstream=shb --keys_dir="$dir/keys" --stats_interval=2s 2>>"$dir/phb.log" & ;;
    shb) "$bin/gryph-broker" --role=shb --data_dir="$dir/shb" --listen="${listen_of[shb]}" \
           --upstream="phb@${listen_of[phb]}" --keys_dir="$dir/keys" --session_timeout=5s \
           --stats_interval=2s 2>>"$dir/shb.log" & ;;
    sub) "$bin/gryph-sub" --broker="shb@${listen_of[shb]}" --name=sub --subscription=audit \
           --selector="k < 5" --state_dir="$dir/sub" --out="$dir/audit.jsonl" \
           --keys_dir="$dir/keys" --stats_interval=2s 2>>"$dir/sub.log" & ;;
    pub) "$bin/gryph-pub" --phb="phb@${listen_of[phb]}" --name=pub --state_dir="$dir/pub" \
           --rate=150 --count=$events --keys_dir="$dir/keys" --stats_interval=2s \
           2>>"$dir/pub.log" & ;;
  esac
  pid_of[$role]=$!
  pids+=($!)
}

start phb
listen_of[phb]=$(endpoint_of "$dir/phb.log") || fail "the PHB did not start"
start shb
listen_of[shb]=$(endpoint_of "$dir/shb.log") || fail "the SHB did not start"
start sub
for _ in $(seq 100); do grep -q connected "$dir/sub.log" && break; sleep 0.1; done
grep -q connected "$dir/sub.log" || fail "the subscriber did not connect"
start pub

# Random sleep of $1 to $2 tenths of a second.
nap() { sleep "$(( $1 + RANDOM % ($2 - $1 + 1) ))e-1"; }

for role in sub shb pub phb sub shb; do
  nap 10 20
  kill -0 "${pid_of[$role]}" 2>/dev/null || fail "$role exited by itself"
  echo "SIGKILL $role"
  kill -9 "${pid_of[$role]}"
  wait "${pid_of[$role]}" 2>/dev/null || true
  forget "${pid_of[$role]}"
  nap 2 8
  start "$role"
done

# The publisher ends once every event is acknowledged (at most 90 s).
pub=${pid_of[pub]}
for _ in $(seq 900); do kill -0 "$pub" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pub" 2>/dev/null && fail "the publisher did not get every event acknowledged"
wait "$pub" || fail "the publisher exited non-zero"
forget "$pub"

# Every event with k < 5 (seq % 10 < 5) once, in tick order (at most 60 s for the last ones).
want=$(( events / 2 ))
check() {
  local seqs ticks
  seqs=$(grep -o '"seq":[0-9]*' "$dir/audit.jsonl" | cut -d: -f2)
  [ "$(echo "$seqs" | grep -c .)" -eq "$want" ] || return 1
  [ "$(echo "$seqs" | sort -n | uniq | grep -c .)" -eq "$want" ] || return 2
  for s in $seqs; do [ $(( s % 10 )) -lt 5 ] || return 3; done
  ticks=$(grep -o '"tick":[0-9]*' "$dir/audit.jsonl" | cut -d: -f2)
  [ "$ticks" = "$(echo "$ticks" | sort -n -u)" ] || return 4
  return 0
}
verdict=1
for _ in $(seq 120); do
  if check; then verdict=0; break; else verdict=$?; fi
  sleep 0.5
done
lines=$(wc -l < "$dir/audit.jsonl")
case $verdict in
  0) echo "exactly once: $want matching events, each once, in tick order" ;;
  1) fail "the subscriber holds $lines lines, not the $want matching events" ;;
  2) fail "the subscriber holds an event twice" ;;
  3) fail "the subscriber holds an event its selector does not match" ;;
  4) fail "the subscriber's events are not in tick order" ;;
esac
"$bin/gryph-inspect" "$dir/shb" >"$dir/inspect.txt" || fail "gryph-inspect on the live SHB"
grep -q audit "$dir/inspect.txt" || fail "gryph-inspect does not list the subscription"

# A clean stop: SIGTERM, and each exits 0.
for role in sub shb phb; do
  kill -TERM "${pid_of[$role]}"
  wait "${pid_of[$role]}" || fail "$role did not exit cleanly on SIGTERM"
  forget "${pid_of[$role]}"
done
echo "ok"
