#!/usr/bin/env bash
# The real-process crash campaign: the programs on loopback with CURVE (gryph-broker as PHB and
# SHB, gryph-pub generating events, two gryph-sub subscribers with different selectors) under a
# supervisor that picks a process at random every 50 ms to 5 s and either SIGKILLs it and restarts
# it with the same flags, or freezes it with SIGSTOP for 0.1 to 2 s and lets it go on with
# SIGCONT, until KILLS kills are done (the publisher leaves the campaign once it has finished by
# itself; choose RATE so that it publishes through most of the kills). Afterwards:
#   - the publisher has exited 0: every event was acknowledged by the PHB (gryph-pub journals each
#     event before it sends it and publishes again what was unanswered after a restart, so no
#     event is in doubt at the end);
#   - each subscriber's file holds every event its selector matches exactly once, in tick order,
#     and nothing else (tests/process/lib.sh, check_matches).
# Prints the cycles (kills and pauses, per process) and the events, the campaign's figures.
#
# Usage: crash_campaign.sh BIN_DIR [KILLS [EVENTS [RATE]]]
#   BIN_DIR holds gryph-broker, gryph-pub and gryph-sub. The short form (ctest) takes 20 kills
#   over 20,000 events; the long form (docs/reliability.md) e.g. 1000 kills over 2,000,000.
#   GRYPH_SEED=<n> replays one run's choices; GRYPH_KEEP=1 keeps its directory.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

bin=$1
kills=${2:-20}
events=${3:-20000}
rate=${4:-250}
process_test_init crash-campaign
for n in phb shb pub sub-a sub-b; do
  "$bin/gryph-broker" --genkey --name=$n --keys_dir="$dir/keys" >/dev/null
done

declare -A listen_of=([phb]="tcp://127.0.0.1:*" [shb]="tcp://127.0.0.1:*")
declare -A selector_of=([sub-a]="k < 5" [sub-b]="k = 3 OR k >= 8")
common=(--keys_dir="$dir/keys" --stats_interval=5s)
start() {
  local role=$1
  case $role in
    phb | shb) start_broker "$role" ;;
    sub-*) "$bin/gryph-sub" --broker="shb@${listen_of[shb]}" --name="$role" \
             --subscription="$role" --selector="${selector_of[$role]}" --state_dir="$dir/$role" \
             --out="$dir/$role.jsonl" "${common[@]}" 2>>"$dir/$role.log" & ;;
    pub) "$bin/gryph-pub" --phb="phb@${listen_of[phb]}" --name=pub --state_dir="$dir/pub" \
           --rate="$rate" --count="$events" "${common[@]}" 2>>"$dir/pub.log" & ;;
  esac
  track "$role"
}

start phb
listen_of[phb]=$(endpoint_of "$dir/phb.log") || fail "the PHB did not start"
start shb
listen_of[shb]=$(endpoint_of "$dir/shb.log") || fail "the SHB did not start"
for s in sub-a sub-b; do
  start "$s"
  for _ in $(seq 100); do grep -q connected "$dir/$s.log" && break; sleep 0.1; done
  grep -q connected "$dir/$s.log" || fail "$s did not connect"
done
start pub

roles=(phb shb pub sub-a sub-b)
declare -A killed=() paused=()
done_kills=0
kills_publishing=0  # of them, while the publisher still ran
pub_done=0
# Once the publisher has exited by itself (every event acknowledged), it must have exited 0, and
# it leaves the campaign; the brokers and subscribers go on being killed until KILLS are done.
reap_pub() {
  [ "$pub_done" = 0 ] || return 0
  kill -0 "${pid_of[pub]}" 2>/dev/null && return 0
  wait "${pid_of[pub]}" || fail "the publisher exited non-zero"
  forget "${pid_of[pub]}"
  pub_done=1
  roles=(phb shb sub-a sub-b)
}
while [ "$done_kills" -lt "$kills" ]; do
  sleep "$(( 50 + RANDOM % 4951 ))e-3"  # 50 ms to 5 s
  reap_pub
  role=${roles[$(( RANDOM % ${#roles[@]} ))]}
  if (( RANDOM % 4 == 0 )); then
    kill -STOP "${pid_of[$role]}"
    sleep "$(( 1 + RANDOM % 20 ))e-1"
    kill -CONT "${pid_of[$role]}"
    paused[$role]=$(( ${paused[$role]:-0} + 1 ))
  else
    if ! kill -0 "${pid_of[$role]}" 2>/dev/null; then
      [ "$role" = pub ] && { reap_pub; continue; }
      fail "$role exited by itself"
    fi
    kill -9 "${pid_of[$role]}"
    wait "${pid_of[$role]}" 2>/dev/null || true
    forget "${pid_of[$role]}"
    sleep "$(( RANDOM % 5 ))e-1"
    start "$role"
    killed[$role]=$(( ${killed[$role]:-0} + 1 ))
    done_kills=$(( done_kills + 1 ))
    [ "$pub_done" = 0 ] && kills_publishing=$(( kills_publishing + 1 ))
  fi
done
# The publisher ends by itself once every event is acknowledged.
if [ "$pub_done" = 0 ]; then
  await_exit pub $(( 600 + events * 10 / rate * 3 ))
fi

summary=""
for r in phb shb pub sub-a sub-b; do summary+=" $r: ${killed[$r]:-0} kills, ${paused[$r]:-0} pauses;"; done
echo "cycles:$summary ($kills_publishing kills while the publisher ran)"
check_matches "$dir/sub-a.jsonl" $(( events / 2 )) "s % 10 < 5"
check_matches "$dir/sub-b.jsonl" $(( events * 3 / 10 )) "s % 10 == 3 || s % 10 >= 8"
for role in sub-a sub-b shb phb; do stop "$role"; done
echo "crash campaign: $done_kills kills over $events events; violations: 0"
