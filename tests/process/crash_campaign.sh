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
#
# Simulated power loss (#17, campaign 3): with GRYPH_POWER_LOSS=DIR (DIR holds
# libgryph_io_shim.so and gryph_power_cut, from tests/campaigns), the brokers run with the shim
# preloaded, which journals their data file's writes that are not yet durable; the kills are of
# the brokers alone (each stands for its host losing power), and after each kill gryph_power_cut
# reverts a random subset of those writes (sector by sector, sometimes a torn sector) before the
# broker restarts. Half the brokers restarted (not the first starts, while the subscribers connect,
# nor the last) also die by themselves at their 1st to 200th sync,
# before it (GRYPH_IO_KILL_AT_SYNC): a cut with a commit's pages written and not yet durable,
# which a kill at a random instant seldom hits; the supervisor cuts and restarts them likewise. The oracle is the same: a write the broker relied on was synced, or a
# publisher's acknowledged event or a subscriber's match goes missing. GRYPH_BROKER_FLAGS adds
# flags to both brokers (--durability=nosync shows the campaign catching acknowledged events
# lost).
#
# Live frame mutation (#17, campaign 5): with GRYPH_MUTATE=DIR (DIR holds libgryph_zmq_mutate.so,
# from tests/campaigns), every process runs with that library preloaded, which mutates one ZeroMQ
# frame in GRYPH_MUTATE_ONE_IN (default 1000) that the process sends — bit flips, truncation,
# bytes appended, four bytes of 0xFF, an earlier frame replayed before it — while the kills and
# pauses go on. The oracle is the same, and in every form each delivered event must be whole:
# its "k" is its "seq" modulo 10 and its payload gryph-pub's 100 bytes of 'x'.
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
power=${GRYPH_POWER_LOSS:-}
mutate=""  # the library every process preloads (an empty LD_PRELOAD loads nothing)
if [ -n "${GRYPH_MUTATE:-}" ]; then
  mutate="$GRYPH_MUTATE/libgryph_zmq_mutate.so"
  export GRYPH_MUTATE_ONE_IN=${GRYPH_MUTATE_ONE_IN:-1000} GRYPH_MUTATE_LOG="$dir/mutations"
fi
read -r -a broker_flags <<<"${GRYPH_BROKER_FLAGS:-}"
cuts=()
# Set for the brokers' first starts, while the subscribers connect (nothing would restart a broker
# that died at a sync then), and for their last start: they do not die at a sync.
final=1
start() {
  local role=$1
  case $role in
    phb | shb)
      if [ -n "$power" ]; then
        local at_sync=0
        (( final == 0 && RANDOM % 2 == 0 )) && at_sync=$(( 1 + RANDOM % 200 ))
        LD_PRELOAD="$power/libgryph_io_shim.so $mutate" GRYPH_IO_JOURNAL="$dir/$role.undo" \
          GRYPH_IO_KILL_AT_SYNC=$at_sync start_broker "$role"
      else
        LD_PRELOAD="$mutate" start_broker "$role"
      fi ;;
    sub-*) LD_PRELOAD="$mutate" "$bin/gryph-sub" --broker="shb@${listen_of[shb]}" --name="$role" \
             --subscription="$role" --selector="${selector_of[$role]}" --state_dir="$dir/$role" \
             --out="$dir/$role.jsonl" "${common[@]}" 2>>"$dir/$role.log" & ;;
    pub) LD_PRELOAD="$mutate" "$bin/gryph-pub" --phb="phb@${listen_of[phb]}" --name=pub --state_dir="$dir/pub" \
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
  for _ in $(seq 100); do grep -q "connected to" "$dir/$s.log" && break; sleep 0.1; done
  grep -q "connected to" "$dir/$s.log" || fail "$s did not connect"
done
start pub
final=0

roles=(phb shb pub sub-a sub-b)
kill_roles=(phb shb pub sub-a sub-b)
[ -n "$power" ] && kill_roles=(phb shb)
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
# After a kill (the supervisor's, or a broker's own at a sync): the power cut, then the restart.
restart_killed() {
  local role=$1
  wait "${pid_of[$role]}" 2>/dev/null || true
  forget "${pid_of[$role]}"
  if [ -n "$power" ]; then
    cuts+=("$("$power/gryph_power_cut" --journal="$dir/$role.undo" \
               --seed=$(( RANDOM * 32768 + RANDOM )))") ||
      fail "gryph_power_cut failed after the kill of $role"
  fi
  sleep "$(( RANDOM % 5 ))e-1"
  start "$role"
  killed[$role]=$(( ${killed[$role]:-0} + 1 ))
  done_kills=$(( done_kills + 1 ))
  if [ "$pub_done" = 0 ]; then kills_publishing=$(( kills_publishing + 1 )); fi
}
# With power loss, a broker that died at a sync of its own.
reap_brokers() {
  [ -n "$power" ] || return 0
  local role
  for role in phb shb; do
    kill -0 "${pid_of[$role]}" 2>/dev/null && continue
    self_kills=$(( self_kills + 1 ))
    restart_killed "$role"
  done
}
self_kills=0
while [ "$done_kills" -lt "$kills" ]; do
  sleep "$(( 50 + RANDOM % 4951 ))e-3"  # 50 ms to 5 s
  reap_pub
  reap_brokers
  [ "$done_kills" -lt "$kills" ] || break
  if (( RANDOM % 4 == 0 )); then
    role=${roles[$(( RANDOM % ${#roles[@]} ))]}
    kill -STOP "${pid_of[$role]}" 2>/dev/null || continue  # gone: the publisher, or a cut
    sleep "$(( 1 + RANDOM % 20 ))e-1"
    kill -CONT "${pid_of[$role]}" 2>/dev/null || true
    paused[$role]=$(( ${paused[$role]:-0} + 1 ))
  else
    role=${kill_roles[$(( RANDOM % ${#kill_roles[@]} ))]}
    if ! kill -0 "${pid_of[$role]}" 2>/dev/null; then
      [ "$role" = pub ] && { reap_pub; continue; }
      [ -n "$power" ] && { self_kills=$(( self_kills + 1 )); restart_killed "$role"; continue; }
      fail "$role exited by itself"
    fi
    kill -9 "${pid_of[$role]}"
    restart_killed "$role"
  fi
done
# With power loss, one last cut of each broker, restarted to stay up (no death at a sync) while
# the publisher and the subscribers finish.
if [ -n "$power" ]; then
  final=1
  for role in phb shb; do
    kill -9 "${pid_of[$role]}" 2>/dev/null || self_kills=$(( self_kills + 1 ))
    restart_killed "$role"
  done
fi
# The publisher ends by itself once every event is acknowledged.
if [ "$pub_done" = 0 ]; then
  await_exit pub $(( 600 + events * 10 / rate * 3 ))
fi

summary=""
for r in phb shb pub sub-a sub-b; do summary+=" $r: ${killed[$r]:-0} kills, ${paused[$r]:-0} pauses;"; done
echo "cycles:$summary ($kills_publishing kills while the publisher ran)"
if [ -n "$power" ]; then
  printf '%s\n' "${cuts[@]}" | tr -d '{}" ' | awk -F'[:,]' -v self="$self_kills" '
    { mode[$2]++; writes += $4; sectors += $6; reverted += $8; if ($10 == "true") torn++ }
    END { printf "power cuts: %d, %d of them at a sync (", NR, self; sep = "";
          for (m in mode) { printf "%s%s %d", sep, m, mode[m]; sep = ", " }
          printf "); %d unsynced writes, %d sectors, %d reverted, %d torn\n",
                 writes, sectors, reverted, torn }'
fi
check_matches "$dir/sub-a.jsonl" $(( events / 2 )) "s % 10 < 5"
check_matches "$dir/sub-b.jsonl" $(( events * 3 / 10 )) "s % 10 == 3 || s % 10 >= 8"
# Each event whole: what a damaged frame would have changed.
for s in sub-a sub-b; do
  bad=$(awk '{
      k = -1; seq = -1; payload = "?"
      if (match($0, /"k":[0-9]+/)) k = substr($0, RSTART + 4, RLENGTH - 4) + 0
      if (match($0, /"seq":[0-9]+/)) seq = substr($0, RSTART + 6, RLENGTH - 6) + 0
      if (match($0, /"payload":"[^"]*"/)) payload = substr($0, RSTART + 11, RLENGTH - 12)
      if (k != seq % 10 || payload !~ /^x*$/ || length(payload) != 100) { print NR ": " $0; exit }
    }' "$dir/$s.jsonl")
  [ -z "$bad" ] || fail "$s.jsonl holds an event that is not whole: line $bad"
done
if [ -n "$mutate" ]; then
  echo "frames mutated: $(sort "$dir/mutations" 2>/dev/null | uniq -c | awk '{ printf "%s%s %d", sep, $2, $1; sep = ", " }')"
fi
for role in sub-a sub-b shb phb; do stop "$role"; done
echo "crash campaign: $done_kills kills${power:+ (power cuts)} over $events events; violations: 0"
