#!/usr/bin/env bash
# Operating a running SHB: gryph-broker's --admin endpoint and --metrics_file, through
# gryph-admin. A subscriber connects, goes away while events are published, and the operator
# sees its state and lag (in ticks and in events), finds it in the metrics file, and deletes it.
#
# Usage: admin.sh BIN_DIR (holding gryph-broker, gryph-pub, gryph-sub, gryph-admin).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

bin=$1
process_test_init admin
admin="ipc://$dir/shb.admin"
metrics="$dir/shb.prom"

ask() { "$bin/gryph-admin" --broker="$admin" "$@"; }
# Waits (at most 10 s) until `ask ARGS` prints something matching PATTERN.
await_answer() {
  local pattern=$1; shift
  for _ in $(seq 100); do
    ask "$@" 2>/dev/null | grep -q -- "$pattern" && return 0
    sleep 0.1
  done
  fail "gryph-admin $* never answered with $pattern (last: $(ask "$@" 2>&1))"
}

"$bin/gryph-broker" --role=phb --data_dir="$dir/phb" --listen="tcp://127.0.0.1:*" \
  --downstream=shb --stats_interval=0 2>>"$dir/phb.log" &
track phb
phb=$(endpoint_of "$dir/phb.log") || fail "the PHB did not start"
"$bin/gryph-broker" --role=shb --data_dir="$dir/shb" --listen="tcp://127.0.0.1:*" \
  --upstream="phb@$phb" --admin="$admin" --metrics_file="$metrics" --stats_interval=200ms \
  --catchup_share=0.5 2>>"$dir/shb.log" &
track shb
shb=$(endpoint_of "$dir/shb.log") || fail "the SHB did not start"

# A share of the broker's time outside (0, 1] is a bad flag.
if "$bin/gryph-broker" --role=shb --data_dir="$dir/other" --listen="tcp://127.0.0.1:*" \
     --upstream="phb@$phb" --catchup_share=0 2>"$dir/bad.log"; then
  fail "--catchup_share=0 was accepted"
else
  [ $? -eq 2 ] || fail "--catchup_share=0 did not exit 2"
fi
grep -q "catchup_share" "$dir/bad.log" || fail "--catchup_share=0 was refused without naming it"

# A bad admin endpoint is a bad flag.
if "$bin/gryph-broker" --role=shb --data_dir="$dir/other" --listen="tcp://127.0.0.1:*" \
     --upstream="phb@$phb" --admin="nonsense://x" 2>"$dir/bad.log"; then
  fail "a bad --admin endpoint was accepted"
else
  [ $? -eq 2 ] || fail "a bad --admin endpoint did not exit 2"
fi

[ "$(ask subscriptions)" = "[]" ] || fail "a new SHB lists subscriptions"
"$bin/gryph-sub" --broker="shb@$shb" --name=sub --subscription=audit --state_dir="$dir/sub" \
  --out="$dir/audit.jsonl" --stats_interval=0 2>>"$dir/sub.log" &
track sub
await_answer '"state":"connected"' subscription audit

"$bin/gryph-pub" --phb="phb@$phb" --name=pub --state_dir="$dir/pub1" --rate=500 --count=40 \
  --stats_interval=0 2>>"$dir/pub.log" &
track pub
await_exit pub 200
for _ in $(seq 100); do [ "$(grep -c . "$dir/audit.jsonl" 2>/dev/null)" = 40 ] && break; sleep 0.1; done
stop sub
await_answer '"state":"disconnected"' subscription audit

# Away while 25 more are published: 25 events of backlog, and the ticks to go with them.
"$bin/gryph-pub" --phb="phb@$phb" --name=pub2 --state_dir="$dir/pub2" --rate=500 --count=25 \
  --stats_interval=0 2>>"$dir/pub.log" &
track pub
await_exit pub 200
await_answer '"backlog_events":25' subscription audit
ask subscription audit | grep -q '"backlog_ticks":[1-9]' || fail "no backlog in ticks"
for _ in $(seq 50); do
  grep -q '^gryph_subscription_connected{subscription="audit"} 0$' "$metrics" && break
  sleep 0.1
done
grep -q '^gryph_subscription_connected{subscription="audit"} 0$' "$metrics" ||
  fail "the metrics file does not show the subscription away: $(cat "$metrics")"
grep -q '^gryph_subscription_backlog_ticks{subscription="audit",pubend="1"} [1-9]' "$metrics" ||
  fail "the metrics file has no backlog"
grep -q '^# TYPE gryph_shb_events_delivered_total counter$' "$metrics" || fail "no TYPE line"
ask stats | grep -q '"events_delivered":40' || fail "stats: $(ask stats)"
ask stats | grep -q '"deliver_to_ack":{"count":[1-9]' || fail "no deliver-to-ack figures"
grep -q '^gryph_shb_deliver_to_ack_seconds_count [1-9]' "$metrics" || fail "no ack histogram"
grep -q '^gryph_shb_commit_seconds_bucket{le="+Inf"} [1-9]' "$metrics" ||
  fail "no commit histogram"
grep -q '^# TYPE gryph_shb_commit_seconds histogram$' "$metrics" || fail "no histogram TYPE"

# Deleting it: gone, and a second delete is refused (exit 1, the reason in the answer).
ask delete audit | grep -q '"deleted":"audit"' || fail "delete did not answer"
[ "$(ask subscriptions)" = "[]" ] || fail "the deleted subscription is still listed"
if ask delete audit >"$dir/again.out"; then fail "a second delete succeeded"; fi
grep -q "no subscription 'audit'" "$dir/again.out" || fail "the refusal does not say why"
if ask frobnicate >/dev/null; then fail "an unknown command succeeded"; fi
ask help | grep -q "delete NAME" || fail "help does not list the commands"

# Nobody at an endpoint: exit 1 after the timeout.
if "$bin/gryph-admin" --broker="ipc://$dir/nobody" --timeout=300ms stats 2>/dev/null; then
  fail "an answer from nobody"
fi
stop shb
stop phb
echo "PASSED"
