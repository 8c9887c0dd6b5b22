#!/usr/bin/env bash
# Several hosts on this machine: network namespaces joined by veth links to one bridge, each
# with an address of its own (10.77.0.0/24, nothing else). A PHB, an intermediate broker and two
# SHBs run on four hosts, a publisher and two durable subscribers on a fifth, all over ZeroMQ
# with CURVE. While events flow, the intermediate, the PHB and one subscriber are SIGKILLed at
# random instants and restarted; SHB a is SIGKILLed and stays down, so that its subscriber moves
# to SHB b with its selector and CT (reconnect anywhere, across hosts). Afterwards each
# subscriber's file must hold every matching event exactly once, in tick order.
#
# Needs root and `ip netns`; exits 77 (skipped) without them.
# Usage: multi_host.sh BIN_DIR. GRYPH_SEED=<n> replays one run's instants; GRYPH_KEEP=1 keeps
# the run's directory.
set -euo pipefail

bin=$1
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then
  echo "SKIPPED: building network namespaces needs root, iproute2 and nsenter"
  exit 77
fi
seed=${GRYPH_SEED:-$$}
RANDOM=$seed
echo "seed $seed (rerun with GRYPH_SEED=$seed)"

tag="g$$"
hosts=(phb ib shba shbb cli)
declare -A addr=([phb]=10.77.0.1 [ib]=10.77.0.2 [shba]=10.77.0.3 [shbb]=10.77.0.4 [cli]=10.77.0.5)
dir=$(mktemp -d "${TMPDIR:-/tmp}/gryph-multi-host-XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for h in "${hosts[@]}" sw; do ip netns del "$tag-$h" 2>/dev/null || true; done
  if [ -n "${GRYPH_KEEP:-}" ]; then echo "kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

# The switch: a bridge in a namespace of its own; each host's veth ends there.
if ! ip netns add "$tag-sw" 2>/dev/null; then
  echo "SKIPPED: ip netns add is not allowed here"
  exit 77
fi
ip -n "$tag-sw" link add br0 type bridge
ip -n "$tag-sw" link set br0 up
for h in "${hosts[@]}"; do
  ip netns add "$tag-$h"
  ip link add "$tag-$h" type veth peer name eth0 netns "$tag-$h"
  ip link set "$tag-$h" netns "$tag-sw"
  ip -n "$tag-sw" link set "$tag-$h" master br0 up
  ip -n "$tag-$h" addr add "${addr[$h]}/24" dev eth0
  ip -n "$tag-$h" link set eth0 up
  ip -n "$tag-$h" link set lo up
done

fail() {
  echo "FAILED: $*" >&2
  for f in "$dir"/*.log; do echo "--- $f"; tail -15 "$f"; done >&2
  exit 1
}

events=2500
for n in phb ib shb-a shb-b pub sub1 sub2; do
  "$bin/gryph-broker" --genkey --name=$n --keys_dir="$dir/keys" >/dev/null
done
phb="phb@tcp://${addr[phb]}:7100"
ib="ib@tcp://${addr[ib]}:7200"
shba="shb-a@tcp://${addr[shba]}:7300"
shbb="shb-b@tcp://${addr[shbb]}:7300"
common=(--keys_dir="$dir/keys" --stats_interval=2s)

declare -A pid_of
forget() { local keep=(); for p in "${pids[@]}"; do [ "$p" != "$1" ] && keep+=("$p"); done; pids=("${keep[@]}"); }
# Run in the background, so in a subshell: exec, and nsenter execs the program itself (ip netns
# exec may fork), so that $! is the program's pid.
on() { local h=$1; shift; exec nsenter --net="/run/netns/$tag-$h" "$@"; }
start() {
  local role=$1
  case $role in
    phb) on phb "$bin/gryph-broker" --role=phb --data_dir="$dir/phb" \
           --listen="tcp://${addr[phb]}:7100" --downstream=ib "${common[@]}" \
           2>>"$dir/phb.log" & ;;
    ib) on ib "$bin/gryph-broker" --role=ib --listen="tcp://${addr[ib]}:7200" \
          --upstream="$phb" --downstream=shb-a,shb-b "${common[@]}" 2>>"$dir/ib.log" & ;;
    shb-a) on shba "$bin/gryph-broker" --role=shb --name=shb-a --data_dir="$dir/shb-a" \
             --listen="tcp://${addr[shba]}:7300" --upstream="$ib" --session_timeout=5s \
             "${common[@]}" 2>>"$dir/shb-a.log" & ;;
    shb-b) on shbb "$bin/gryph-broker" --role=shb --name=shb-b --data_dir="$dir/shb-b" \
             --listen="tcp://${addr[shbb]}:7300" --upstream="$ib" --session_timeout=5s \
             "${common[@]}" 2>>"$dir/shb-b.log" & ;;
    sub1) on cli "$bin/gryph-sub" --broker="$shba,$shbb" --name=sub1 --subscription=low \
            --selector="k < 5" --state_dir="$dir/sub1" --out="$dir/sub1.jsonl" \
            --failover_after=3s "${common[@]}" 2>>"$dir/sub1.log" & ;;
    sub2) on cli "$bin/gryph-sub" --broker="$shbb,$shba" --name=sub2 --subscription=high \
            --selector="k >= 3" --state_dir="$dir/sub2" --out="$dir/sub2.jsonl" \
            --failover_after=3s "${common[@]}" 2>>"$dir/sub2.log" & ;;
    pub) on cli "$bin/gryph-pub" --phb="$phb" --name=pub --state_dir="$dir/pub" --rate=100 \
           --count=$events "${common[@]}" 2>>"$dir/pub.log" & ;;
  esac
  pid_of[$role]=$!
  pids+=($!)
}
kill9() {
  echo "SIGKILL $1"
  kill -9 "${pid_of[$1]}"
  wait "${pid_of[$1]}" 2>/dev/null || true
  forget "${pid_of[$1]}"
}
nap() { sleep "$(( $1 + RANDOM % ($2 - $1 + 1) ))e-1"; }

for role in phb ib shb-a shb-b; do start "$role"; done
sleep 1
start sub1
start sub2
for _ in $(seq 150); do
  grep -q connected "$dir/sub1.log" 2>/dev/null && grep -q connected "$dir/sub2.log" 2>/dev/null &&
    break
  sleep 0.1
done
grep -q connected "$dir/sub1.log" && grep -q connected "$dir/sub2.log" ||
  fail "the subscribers did not connect"
start pub

for role in ib sub2 phb shb-a ib; do
  nap 10 25
  kill -0 "${pid_of[$role]}" 2>/dev/null || fail "$role exited by itself"
  kill9 "$role"
  # SHB a stays down: sub1 moves to SHB b.
  [ "$role" = shb-a ] && continue
  nap 2 8
  start "$role"
done

pub=${pid_of[pub]}
for _ in $(seq 1200); do kill -0 "$pub" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pub" 2>/dev/null && fail "the publisher did not get every event acknowledged"
wait "$pub" || fail "the publisher exited non-zero"
forget "$pub"

# Each subscriber: every event its selector matches once, in tick order.
check() {
  local file=$1 want=$2 test=$3 seqs ticks
  seqs=$(grep -o '"seq":[0-9]*' "$file" | cut -d: -f2)
  [ "$(echo "$seqs" | grep -c .)" -eq "$want" ] || return 1
  [ "$(echo "$seqs" | sort -n | uniq | grep -c .)" -eq "$want" ] || return 2
  for s in $seqs; do [ $(( s % 10 )) "$test" 5 ] || [ "$test" = -ge ] || return 3; done
  ticks=$(grep -o '"tick":[0-9]*' "$file" | cut -d: -f2)
  [ "$ticks" = "$(echo "$ticks" | sort -n -u)" ] || return 4
  return 0
}
for sub in sub1:$(( events / 2 )):-lt sub2:$(( events * 7 / 10 )):-ge; do
  IFS=: read -r name want test <<<"$sub"
  verdict=1
  for _ in $(seq 120); do
    if check "$dir/$name.jsonl" "$want" "$test"; then verdict=0; break; else verdict=$?; fi
    sleep 0.5
  done
  lines=$(wc -l <"$dir/$name.jsonl")
  case $verdict in
    0) echo "$name: exactly once, $want matching events in tick order" ;;
    1) fail "$name holds $lines lines, not the $want matching events" ;;
    2) fail "$name holds an event twice" ;;
    3) fail "$name holds an event its selector does not match" ;;
    4) fail "$name's events are not in tick order" ;;
  esac
done
grep -q "moving to shb-b" "$dir/sub1.log" || fail "sub1 never moved to shb-b"

for role in sub1 sub2 shb-b ib phb; do
  kill -TERM "${pid_of[$role]}"
  wait "${pid_of[$role]}" || fail "$role did not exit cleanly on SIGTERM"
  forget "${pid_of[$role]}"
done
echo "ok"
