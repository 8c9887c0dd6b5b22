#!/usr/bin/env bash
# Abuse (#17, campaign 6), the programs on loopback: a subscriber that never acknowledges and
# never reads (its gryph-sub SIGSTOPped once connected) while events flow at RATE per second for
# SECONDS, beside a well-behaved one. Every second it samples the PHB's store (gryph-inspect on
# the live directory: the span of events it still holds, and the size of data.mdb) and the SHB's
# resident memory. It checks:
#   - the PHB holds no more than max_retain (2 s) of events, plus the release and reclaim
#     intervals (1.5 s), however long the stuck subscriber stays: it cannot hold the PHB's
#     storage, and data.mdb stops growing once the retention window is full;
#   - the SHB's memory stays bounded: the stuck session is paced by its acknowledgements
#     (max_unacked_events), not buffered;
#   - the well-behaved subscriber gets every match exactly once, and the stuck one, let go at the
#     end, a Gap for what was released without it and everything after it exactly once.
# Prints the samples' maxima, the campaign's figures.
#
# Usage: abuse.sh BIN_DIR [SECONDS [RATE]]   (BIN_DIR holds gryph-broker, gryph-pub, gryph-sub and
#   gryph-inspect). GRYPH_SEED=<n> and GRYPH_KEEP=1 as in lib.sh.
#
# A long read transaction: with GRYPH_HOLD=DIR (DIR holds gryph_hold_snapshot, from
# tests/campaigns), a process outside the brokers opens the PHB's store at 6 s and holds one read
# snapshot for GRYPH_HOLD_SECONDS (default 10): the campaign reports how much data.mdb grew
# meanwhile (LMDB reuses no page freed after the oldest snapshot began), instead of checking it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

bin=$1
seconds=${2:-20}
rate=${3:-1000}
payload=1000
events=$(( seconds * rate ))
process_test_init abuse
declare -A listen_of=([phb]="tcp://127.0.0.1:*" [shb]="tcp://127.0.0.1:*")
common=(--stats_interval=5s)

"$bin/gryph-broker" --role=phb --data_dir="$dir/phb" --listen="${listen_of[phb]}" \
  --downstream=shb --max_retain=2s "${common[@]}" 2>>"$dir/phb.log" &
track phb
listen_of[phb]=$(endpoint_of "$dir/phb.log") || fail "the PHB did not start"
"$bin/gryph-broker" --role=shb --data_dir="$dir/shb" --listen="${listen_of[shb]}" \
  --upstream="phb@${listen_of[phb]}" "${common[@]}" 2>>"$dir/shb.log" &
track shb
listen_of[shb]=$(endpoint_of "$dir/shb.log") || fail "the SHB did not start"
declare -A selector_of=([good]="k < 5" [stuck]="")
for s in good stuck; do
  "$bin/gryph-sub" --broker="shb@${listen_of[shb]}" --name="$s" --subscription="$s" \
    --selector="${selector_of[$s]}" --state_dir="$dir/$s" --out="$dir/$s.jsonl" "${common[@]}" \
    2>>"$dir/$s.log" &
  track "$s"
  for _ in $(seq 100); do grep -q "connected to" "$dir/$s.log" && break; sleep 0.1; done
  grep -q "connected to" "$dir/$s.log" || fail "$s did not connect"
done
kill -STOP "${pid_of[stuck]}"
"$bin/gryph-pub" --phb="phb@${listen_of[phb]}" --name=pub --state_dir="$dir/pub" --rate="$rate" \
  --count="$events" --payload_bytes="$payload" "${common[@]}" 2>>"$dir/pub.log" &
track pub

# json_number FILE KEY: the first number under KEY in gryph-inspect's JSON.
json_number() { grep -oE "\"$2\": ?[0-9]+" "$1" | head -1 | grep -oE '[0-9]+$' || echo 0; }
max_span_ms=0 max_file=0 max_rss=0 warm_file=0 warm_rss=0 samples=0 hold_file=0
hold_seconds=${GRYPH_HOLD_SECONDS:-10}
t=0
while kill -0 "${pid_of[pub]}" 2>/dev/null && [ "$t" -lt $(( seconds * 3 )) ]; do
  sleep 1
  t=$(( t + 1 ))
  "$bin/gryph-inspect" --json "$dir/phb" >"$dir/inspect.json" 2>>"$dir/inspect.err" ||
    fail "gryph-inspect failed on the live PHB directory: $(tail -1 "$dir/inspect.err")"
  first=$(json_number "$dir/inspect.json" first_tick)
  last=$(json_number "$dir/inspect.json" last_tick)
  span_ms=$(( (last - first) / 1000 ))  # ticks are microseconds
  file=$(stat -c %s "$dir/phb/data.mdb")
  rss=$(awk '/^VmRSS/ { print $2 }' "/proc/${pid_of[shb]}/status")
  echo "$t s: events $first..$last ($span_ms ms), data.mdb $file bytes, SHB $rss KiB" \
    >>"$dir/samples.txt"
  [ "$t" = 5 ] && { warm_file=$file; warm_rss=$rss; }
  if [ -n "${GRYPH_HOLD:-}" ] && [ "$t" = 6 ]; then
    hold_file=$file
    "$GRYPH_HOLD/gryph_hold_snapshot" "$dir/phb" "$hold_seconds" 2>>"$dir/hold.log" &
  fi
  if [ "$t" -ge 5 ]; then  # the retention window is full: from here on nothing may grow
    samples=$(( samples + 1 ))
    (( span_ms > max_span_ms )) && max_span_ms=$span_ms
    (( file > max_file )) && max_file=$file
    (( rss > max_rss )) && max_rss=$rss
  fi
done
await_exit pub 60
[ "$samples" -ge 5 ] || fail "only $samples samples after the retention window filled"
echo "PHB: at most $max_span_ms ms of events held (max_retain 2000 ms), data.mdb at most" \
     "$(( max_file / 1048576 )) MiB ($(( warm_file / 1048576 )) MiB at 5 s);" \
     "SHB resident at most $(( max_rss / 1024 )) MiB ($(( warm_rss / 1024 )) MiB at 5 s);" \
     "$samples samples, $events events of $payload bytes at $rate/s"
(( max_span_ms <= 3500 )) || fail "the PHB held $max_span_ms ms of events, beyond max_retain"
if [ -n "${GRYPH_HOLD:-}" ]; then
  wait $! 2>/dev/null || true
  echo "a reader holding one snapshot for $hold_seconds s: data.mdb from" \
       "$(( hold_file / 1048576 )) MiB to $(( max_file / 1048576 )) MiB" \
       "($(( rate * payload * hold_seconds / 1048576 )) MiB published meanwhile)"
else
  (( max_file <= 2 * warm_file + 8 * 1048576 )) ||
    fail "the PHB's data.mdb grew to $max_file bytes from $warm_file"
fi
(( max_rss <= 2 * warm_rss + 65536 )) || fail "the SHB's memory grew to $max_rss KiB from $warm_rss"

check_matches "$dir/good.jsonl" $(( events / 2 )) "s % 10 < 5"
# The stuck one, let go: a Gap for what early release discarded, then the rest once each.
kill -CONT "${pid_of[stuck]}"
for _ in $(seq 600); do
  grep -q "\"seq\":$events[,}]" "$dir/stuck.jsonl" 2>/dev/null && break
  sleep 0.1
done
grep -q '"gap"' "$dir/stuck.jsonl" || fail "the stuck subscriber got no Gap for what was released"
grep -q "\"seq\":$events[,}]" "$dir/stuck.jsonl" || fail "the stuck subscriber never caught up"
seqs=$(grep -o '"seq":[0-9]*' "$dir/stuck.jsonl" | cut -d: -f2)
[ "$(echo "$seqs" | sort -n | uniq -d | wc -l)" = 0 ] || fail "the stuck subscriber got an event twice"
ticks=$(grep -o '"tick":[0-9]*' "$dir/stuck.jsonl" | cut -d: -f2)
[ "$ticks" = "$(echo "$ticks" | sort -n -u)" ] || fail "the stuck subscriber's ticks are out of order"
echo "stuck subscriber: $(echo "$seqs" | grep -c .) events after $(grep -c '"gap"' "$dir/stuck.jsonl")" \
     "Gap(s), each once, in tick order"
for r in good stuck shb phb; do stop "$r"; done
echo "abuse: violations: 0"
