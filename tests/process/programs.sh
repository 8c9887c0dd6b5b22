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
source "$(dirname "$0")/lib.sh"

bin=$1
process_test_init programs
events=2000
for n in phb shb pub sub sub2; do
  "$bin/gryph-broker" --genkey --name=$n --keys_dir="$dir/keys" >/dev/null
done

declare -A listen_of=([phb]="tcp://127.0.0.1:*" [shb]="tcp://127.0.0.1:*")
common=(--keys_dir="$dir/keys" --stats_interval=2s)
start() {
  local role=$1
  case $role in
    phb | shb) start_broker "$role" ;;
    sub) "$bin/gryph-sub" --broker="shb@${listen_of[shb]}" --name=sub --subscription=audit \
           --selector="k < 5" --state_dir="$dir/sub" --out="$dir/audit.jsonl" \
           "${common[@]}" 2>>"$dir/sub.log" & ;;
    pub) "$bin/gryph-pub" --phb="phb@${listen_of[phb]}" --name=pub --state_dir="$dir/pub" \
           --rate=150 --count=$events --print_acks "${common[@]}" >>"$dir/pub.acks" \
           2>>"$dir/pub.log" & ;;
  esac
  track "$role"
}

start phb
listen_of[phb]=$(endpoint_of "$dir/phb.log") || fail "the PHB did not start"
start shb
listen_of[shb]=$(endpoint_of "$dir/shb.log") || fail "the SHB did not start"
start sub
for _ in $(seq 100); do grep -q "connected to" "$dir/sub.log" && break; sleep 0.1; done
grep -q "connected to" "$dir/sub.log" || fail "the subscriber did not connect"
start pub

for role in sub shb pub phb sub shb; do
  nap 10 20
  kill9 "$role"
  nap 2 8
  start "$role"
done

await_exit pub 900  # every event acknowledged (at most 90 s)
check_matches "$dir/audit.jsonl" $(( events / 2 )) "s % 10 < 5"
"$bin/gryph-inspect" "$dir/shb" >"$dir/inspect.txt" || fail "gryph-inspect on the live SHB"
grep -q audit "$dir/inspect.txt" || fail "gryph-inspect does not list the subscription"
# Another process asking for the subscription with another selector is refused for good: its
# subscriber gives up, and gryph-sub exits with the refused code (3), naming the reason.
rc=0
timeout 60 "$bin/gryph-sub" --broker="shb@${listen_of[shb]}" --name=sub2 --subscription=audit \
  --selector="k > 5" --state_dir="$dir/sub2" --out="$dir/other.jsonl" "${common[@]}" \
  2>"$dir/sub2.log" || rc=$?
[ "$rc" -eq 3 ] || fail "a refused gryph-sub exited $rc, not 3 (see sub2.log)"
grep -q "another selector" "$dir/sub2.log" || fail "the refused gryph-sub did not say why"
for role in sub shb phb; do stop "$role"; done
echo "ok"
