#!/usr/bin/env bash
# Several hosts on this machine: network namespaces joined by veth links to one bridge, each
# with an address of its own (10.77.0.0/24, nothing else). A PHB, an intermediate broker and two
# SHBs run on four hosts, a publisher and two durable subscribers on a fifth, all over ZeroMQ
# with CURVE. While events flow, the intermediate, the PHB and one subscriber are SIGKILLed at
# random instants and restarted; SHB a is SIGKILLed and stays down, so that its subscriber moves
# to SHB b with its selector and CT (reconnect anywhere, across hosts). Afterwards each
# subscriber's file must hold every matching event exactly once, in tick order.
#
# Campaign form (#17, campaign 1 on several hosts): with KILLS, the hosts' processes (PHB,
# intermediate, both SHBs, both subscribers) are instead SIGKILLed at random, one every 0.5 to
# 3 s, and restarted 0.2 to 2 s later (an SHB one time in two 4 to 8 s later, past the
# subscribers' failover_after: they move to the other SHB with their CT), KILLS times, while
# EVENTS are published at RATE; the same checks follow.
#
# Needs root and `ip netns`; exits 77 (skipped) without them.
# Usage: multi_host.sh BIN_DIR [KILLS EVENTS RATE]. GRYPH_SEED=<n> replays one run's instants;
# GRYPH_KEEP=1 keeps the run's directory.
set -euo pipefail

source "$(dirname "$0")/lib.sh"

bin=$1
kills=${2:-0}
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then
  echo "SKIPPED: building network namespaces needs root, iproute2 and nsenter"
  exit 77
fi
process_test_init multi-host
tag="g$$"
hosts=(phb ib shba shbb cli)
declare -A addr=([phb]=10.77.0.1 [ib]=10.77.0.2 [shba]=10.77.0.3 [shbb]=10.77.0.4 [cli]=10.77.0.5)
on_cleanup() {
  for h in "${hosts[@]}" sw; do ip netns del "$tag-$h" 2>/dev/null || true; done
}

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

events=${3:-2500}
rate=${4:-100}
for n in phb ib shb-a shb-b pub sub1 sub2; do
  "$bin/gryph-broker" --genkey --name=$n --keys_dir="$dir/keys" >/dev/null
done
phb="phb@tcp://${addr[phb]}:7100"
ib="ib@tcp://${addr[ib]}:7200"
shba="shb-a@tcp://${addr[shba]}:7300"
shbb="shb-b@tcp://${addr[shbb]}:7300"
common=(--keys_dir="$dir/keys" --stats_interval=2s)

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
    pub) on cli "$bin/gryph-pub" --phb="$phb" --name=pub --state_dir="$dir/pub" --rate="$rate" \
           --count=$events "${common[@]}" 2>>"$dir/pub.log" & ;;
  esac
  track "$role"
}

for role in phb ib shb-a shb-b; do start "$role"; done
sleep 1
start sub1
start sub2
for _ in $(seq 150); do
  grep -q "connected to" "$dir/sub1.log" 2>/dev/null && grep -q "connected to" "$dir/sub2.log" 2>/dev/null &&
    break
  sleep 0.1
done
grep -q "connected to" "$dir/sub1.log" && grep -q "connected to" "$dir/sub2.log" ||
  fail "the subscribers did not connect"
start pub

declare -A killed=()
if [ "$kills" -gt 0 ]; then
  roles=(phb ib shb-a shb-b sub1 sub2)
  for _ in $(seq "$kills"); do
    nap 5 30
    role=${roles[$(( RANDOM % ${#roles[@]} ))]}
    kill9 "$role"
    killed[$role]=$(( ${killed[$role]:-0} + 1 ))
    # An SHB stays down past the subscribers' failover_after one time in two: they move.
    if [[ $role == shb-* ]] && (( RANDOM % 2 == 0 )); then nap 40 80; else nap 2 20; fi
    start "$role"
  done
  summary=""
  for r in "${roles[@]}"; do summary+=" $r ${killed[$r]:-0};"; done
  echo "kills:$summary over $events events"
else
  for role in ib sub2 phb shb-a ib; do
    nap 10 25
    kill9 "$role"
    # SHB a stays down: sub1 moves to SHB b.
    [ "$role" = shb-a ] && continue
    nap 2 8
    start "$role"
  done
fi

await_exit pub $(( 1200 + events * 30 / rate ))  # every event acknowledged
check_matches "$dir/sub1.jsonl" $(( events / 2 )) "s % 10 < 5"
check_matches "$dir/sub2.jsonl" $(( events * 7 / 10 )) "s % 10 >= 3"
if [ "$kills" = 0 ]; then
  grep -q "moving to shb-b" "$dir/sub1.log" || fail "sub1 never moved to shb-b"
fi
echo "moves: sub1 $(grep -c "moving to" "$dir/sub1.log"), sub2 $(grep -c "moving to" "$dir/sub2.log")"

for role in sub1 sub2 shb-b ib phb; do stop "$role"; done
[ "$kills" = 0 ] || stop shb-a
echo "ok"
