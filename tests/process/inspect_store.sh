#!/usr/bin/env bash
# gryph-inspect, the binary itself, on copies of the golden store (tests/data/store-v2: a PHB's
# store and an SHB's, every row listed in its rows.txt, decoded in tests/store_golden_test.cc):
# the figures it prints, as text and as JSON, must be the listing's; a missing directory, one
# without a store and bad flags exit 2; a damaged row is reported and exits 1; and the store
# files it read are byte for byte what they were.
#
# Usage: inspect_store.sh PATH/TO/gryph-inspect PATH/TO/tests/data/store-v2.
# GRYPH_KEEP=1 keeps the run's directory.
set -euo pipefail

inspect=$1
golden=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/gryph-inspect-XXXXXX")
cleanup() { if [ -n "${GRYPH_KEEP:-}" ]; then echo "kept $dir"; else rm -rf "$dir"; fi; }
trap cleanup EXIT

cp -r "$golden" "$dir/store"
phb=$dir/store/phb
shb=$dir/store/shb
failures=0
fail() {
  echo "FAILED: $*" >&2
  failures=$((failures + 1))
}

# run WANT_EXIT NAME ARGS...: runs gryph-inspect, its standard output into $dir/NAME.out, its
# standard error into $dir/NAME.err.
run() {
  local want=$1 name=$2
  shift 2
  local got=0
  "$inspect" "$@" >"$dir/$name.out" 2>"$dir/$name.err" || got=$?
  if [ "$got" != "$want" ]; then
    fail "$name: gryph-inspect $* exited $got, not $want"
    sed 's/^/    /' "$dir/$name.err" >&2
  fi
}
# has NAME REGEX: a line of NAME's output matches REGEX (extended).
has() { grep -qE -- "$2" "$dir/$1.out" || fail "$1: no line matches '$2'"; }
# err_has NAME TEXT: NAME's standard error holds TEXT.
err_has() { grep -qF -- "$2" "$dir/$1.err" || fail "$1: stderr lacks '$2'"; }
# json_has NAME TEXT: NAME's JSON, without its blanks and line breaks, holds TEXT.
json_has() {
  tr -d ' \n' <"$dir/$1.out" >"$dir/$1.compact"
  grep -qF -- "$2" "$dir/$1.compact" || fail "$1: the JSON lacks $2"
}

# ---- The PHB's store (rows.txt, "[phb]") ----------------------------------------------------------
# pubend.meta 1/2 'T' = 0x6baa8; events p1 at 0x5208, 0x5209, 0xa028, 0xa029, p2 at 0x5208, 0xa028;
# downstream shb: released 0, latest_delivered 0x53408; publishers p1 gw-a 1..3 (3 at 0xa028),
# gw-b 1 (0xa029), p2 gw-b 1..2 (2 at 0xa028).
run 0 phb "$phb"
has phb '^publisher hosting broker: 2 pubends$'
has phb '^  1 +441000 +441000 +0 +4 +21000\.\.41001$'
has phb '^  2 +441000 +441000 +0 +2 +21000\.\.41000$'
has phb '^  1 +shb +0 +341000$'
has phb '^  2 +shb +0 +341000$'
has phb '^  1 +gw-a +3 +41000 +3$'
has phb '^  1 +gw-b +1 +41001 +1$'
has phb '^  2 +gw-b +2 +41000 +2$'
has phb '^damage: none$'
grep -q 'subscriber hosting broker' "$dir/phb.out" && fail "phb: reports an SHB"

run 0 phb_json --json "$phb"
json_has phb_json '"format_version":2,'
json_has phb_json '{"pubend":1,"latest_tick":441000,"announced_tick":441000,"l_prefix":0,"events":{"count":4,"first_tick":21000,"last_tick":41001},"release_table":[{"node":"shb","released":0,"latest_delivered":341000}],"publishers":[{"publisher":"gw-a","last_sequence":3,"tick":41000,"rows":3},{"publisher":"gw-b","last_sequence":1,"tick":41001,"rows":1}]}'
json_has phb_json '{"pubend":2,"latest_tick":441000,"announced_tick":441000,"l_prefix":0,"events":{"count":2,"first_tick":21000,"last_tick":41000},"release_table":[{"node":"shb","released":0,"latest_delivered":341000}],"publishers":[{"publisher":"gw-b","last_sequence":2,"tick":41000,"rows":2}]}'
json_has phb_json '"shb":null,"notes":[],"damaged":false,"damage":[]}'

# ---- The SHB's store (rows.txt, "[shb]") ----------------------------------------------------------
# shb.delivered 1/2: 0x53408, lease 0x147648; next_id 3; "all" id 2 epoch 1 (positions 2/1
# released 0xa029, 2/2 released 0xa028), "audit" id 1 epoch 1 selector "qty > 10" (released 0);
# pfs.records p1 0x5208 {2}, 0x5209 {1,2}, 0xa028 {1,2}, 0xa029 {1,2}; p2 0x5208 {1,2},
# 0xa028 {2}; pfs.meta 'C' p1 0xa029, p2 0xa028.
run 0 shb "$shb"
has shb '^subscriber hosting broker: 2 pubends, 2 subscriptions, next subscriber id 3$'
has shb '^  1 +341000 +1341000 +4 +21000\.\.41001 +41001 +0 +2$'
has shb '^  2 +341000 +1341000 +2 +21000\.\.41000 +41000 +0 +2$'
has shb '^  all +2 +1 +"" +"orders/#"$'
has shb '^  audit +1 +1 +"qty > 10" +"orders/#"$'
has shb '^  all +1 +0 +41001 +299999 +0$'
has shb '^  all +2 +0 +41000 +300000 +0$'
has shb '^  audit +1 +0 +0 +341000 +3$'
has shb '^  audit +2 +0 +0 +341000 +1$'
has shb '^damage: none$'
grep -q 'PFS records of' "$dir/shb.out" && fail "shb: lists records without --subscriber"

run 0 shb_audit --subscriber=audit "$shb"
has shb_audit '^    pubend 1: 3 records above 0: 21001 41000 41001$'
has shb_audit '^    pubend 2: 1 record above 0: 21000$'
run 0 shb_limit --subscriber=audit --pfs_limit=2 "$shb"
has shb_limit '^    pubend 1: 3 records above 0: 21001 41000 \(the first 2\)$'
run 0 shb_all --subscriber=all "$shb"
has shb_all '^    pubend 1: 0 records above 41001$'

run 0 shb_json --json --subscriber=audit --pfs_limit=2 "$shb"
json_has shb_json '"phb":null,"shb":{"next_subscriber_id":3,'
json_has shb_json '{"pubend":1,"latest_delivered":341000,"lease":1341000,"pfs":{"records":4,"first_tick":21000,"last_tick":41001,"checkpoint_tick":41001,"chop_tick":0,"subscribers":2}}'
json_has shb_json '{"pubend":2,"latest_delivered":341000,"lease":1341000,"pfs":{"records":2,"first_tick":21000,"last_tick":41000,"checkpoint_tick":41000,"chop_tick":0,"subscribers":2}}'
json_has shb_json '{"name":"all","id":2,"epoch":1,"selector":"","topic_filter":"orders/#","positions":[{"pubend":1,"created":0,"released":41001,"backlog_ticks":299999,"backlog_records":0},{"pubend":2,"created":0,"released":41000,"backlog_ticks":300000,"backlog_records":0}]}'
json_has shb_json '{"name":"audit","id":1,"epoch":1,"selector":"qty>10","topic_filter":"orders/#","positions":[{"pubend":1,"created":0,"released":0,"backlog_ticks":341000,"backlog_records":3},{"pubend":2,"created":0,"released":0,"backlog_ticks":341000,"backlog_records":1}]}'
json_has shb_json '"subscriber":{"name":"audit","id":1,"pfs_limit":2,"pubends":[{"pubend":1,"released":0,"records":3,"ticks":[21001,41000],"truncated":true},{"pubend":2,"released":0,"records":1,"ticks":[21000],"truncated":false}]}'
json_has shb_json '"damaged":false,"damage":[]}'
# Where python3 is at hand, the document parses as JSON too.
if command -v python3 >/dev/null 2>&1 && python3 -c 'pass' 2>/dev/null; then
  for name in phb_json shb_json; do
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$dir/$name.out" ||
      fail "$name: not a JSON document"
  done
fi

# ---- Directories without a store, bad flags -----------------------------------------------------
run 2 missing "$dir/absent"
err_has missing "no directory"
[ -e "$dir/absent" ] && fail "missing: the directory was created"
mkdir "$dir/empty"
run 2 empty "$dir/empty"
err_has empty "holds no store"
[ -z "$(ls -A "$dir/empty")" ] || fail "empty: something was created in it: $(ls -A "$dir/empty")"
mkdir "$dir/other"
echo "a broker's notes" >"$dir/other/notes.txt"
run 2 other "$dir/other"
[ "$(ls -A "$dir/other")" = notes.txt ] || fail "other: something was created in it"
# A data file that is not LMDB's (its meta pages overwritten, say) is damage, not a usage error.
mkdir "$dir/garbage"
echo "not a store" >"$dir/garbage/data.mdb"
run 1 garbage "$dir/garbage"
err_has garbage "not an LMDB file"
run 2 no_dir
run 2 two_dirs "$phb" "$shb"
run 2 bad_flag --bogus "$phb"
err_has bad_flag "unknown flag --bogus"
run 2 bad_limit --subscriber=audit --pfs_limit=-1 "$shb"
run 2 bad_value --pfs_limit=many "$shb"
run 2 no_subscription --subscriber=nobody "$shb"
err_has no_subscription "no subscription 'nobody'"
run 2 subscriber_of_phb --subscriber=audit "$phb"

# ---- Read-only: the store files are what they were -----------------------------------------------
for store in phb shb; do
  cmp -s "$golden/$store/data.mdb" "$dir/store/$store/data.mdb" ||
    fail "$store: data.mdb changed under gryph-inspect"
done

# ---- Damage: reported, what else there is still printed, exit 1 ---------------------------------
# A flipped byte in "audit"'s selector fails that row's checksum.
cp -r "$golden/shb" "$dir/damaged"
offset=$(grep -obUaF 'qty > 10' "$dir/damaged/data.mdb" | head -1 | cut -d: -f1)
if [ -z "$offset" ]; then
  fail "damaged: the selector's bytes are not in the data file"
else
  printf 'Q' | dd of="$dir/damaged/data.mdb" bs=1 seek="$offset" conv=notrunc 2>/dev/null
  run 1 damaged "$dir/damaged"
  has damaged '^DAMAGED: 1 problem$'
  has damaged '^  shb\.subscriptions 6175646974: DATA_LOSS: .*checksum mismatch'
  has damaged '^  all +1 +0 +41001 +299999 +0$'
  has damaged 'subscriber id 1 at pubend 1 belongs to no subscription'
  run 1 damaged_json --json "$dir/damaged"
  json_has damaged_json '"damaged":true,"damage":[{"table":"shb.subscriptions","key":"6175646974",'
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed; outputs in $dir (GRYPH_KEEP=1 keeps it)" >&2
  exit 1
fi
echo "ok"
