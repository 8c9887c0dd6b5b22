#!/usr/bin/env bash
# The demo under SIGTERM: it stops publishing, lets its subscribers catch up, prints its summary
# and an exactly-once verdict, exits 0 and leaves nothing in its temporary directory. Its
# progress marks the long absence, the crash and the return as they happen, and --json writes
# one timeline line per second carrying the same marks.
#   demo_sigterm.sh TRADING_DEMO
set -euo pipefail
source "$(dirname "$0")/lib.sh"
demo=$1
process_test_init demo-sigterm
mkdir "$dir/tmp"

# maxRetain 1 s: the long-absent subscriber (away from 2 s) has lost events by the SIGTERM at
# about 12 s; the crash comes at 10 s (half of --duration).
TMPDIR="$dir/tmp" "$demo" --duration=20 --subscribers=40 --rate=400 --max_retain=1 \
  --json="$dir/timeline.jsonl" >"$dir/demo.out" 2>"$dir/demo.log" &
track demo
sleep 12
stop demo
cat "$dir/demo.out"

grep -q "exactly-once check: every subscriber got every matching order exactly once" \
  "$dir/demo.out" || fail "no exactly-once verdict in the summary"
[ -z "$(ls -A "$dir/tmp")" ] || fail "the demo left $(ls "$dir/tmp") in its temporary directory"
for m in absence crash stop return; do
  grep -q "\"what\": \"$m\"" "$dir/timeline.jsonl" || fail "the timeline has no \"$m\" mark"
done
tr '\r' '\n' <"$dir/demo.log" | grep -q "goes away for" || fail "no line marks the absence"
tr '\r' '\n' <"$dir/demo.log" | grep -q "crashes and reopens" || fail "no line marks the crash"
tr '\r' '\n' <"$dir/demo.log" | grep -q "returns after" || fail "no line marks the return"
lines=$(wc -l <"$dir/timeline.jsonl")
[ "$lines" -ge 10 ] || fail "the timeline has $lines lines, fewer than the seconds run"
echo "SIGTERM: summary, verdict, marks and a $lines-line timeline; temporary directory removed"
