# Shared by the process tests that run the programs (programs.sh, admin.sh, crash_campaign.sh,
# multi_host.sh, demo_sigterm.sh); sourced.
#   process_test_init NAME   seeds $RANDOM from GRYPH_SEED (printed), makes $dir, and on exit
#                            kills what start_process started, runs `on_cleanup` if defined and
#                            removes $dir (GRYPH_KEEP=1 keeps it).
#   track ROLE               records $! as ROLE's process.
#   kill9 ROLE               SIGKILLs ROLE's process and waits for it.
#   stop ROLE                SIGTERMs ROLE's process and fails unless it exits 0.
#   nap MIN MAX              sleeps MIN to MAX tenths of a second.
#   fail WHAT                prints WHAT and the tail of every log in $dir, exits 1.
#   await_exit ROLE TENTHS   waits for ROLE's process to end by itself, fails unless with 0.
#   endpoint_of LOG          prints the endpoint a gryph-broker logged it listens on (it binds a
#                            free port once and keeps it across restarts), waiting up to 10 s.
#   start_broker phb|shb     starts $bin/gryph-broker in the background as the PHB (downstream:
#                            shb) or the SHB (upstream: the PHB), listening on ${listen_of[ROLE]},
#                            with "${common[@]}" and "${broker_flags[@]}" (empty unless set),
#                            logging to $dir/ROLE.log; $! is its pid.
#   check_matches FILE WANT FILTER   waits (at most 60 s) until FILE (gryph-sub's JSON lines)
#                            holds WANT events, each "seq" once, each passing FILTER (an awk
#                            condition on s, the sequence), their ticks strictly increasing.

process_test_init() {
  seed=${GRYPH_SEED:-$$}
  RANDOM=$seed
  echo "seed $seed (rerun with GRYPH_SEED=$seed)"
  dir=$(mktemp -d "${TMPDIR:-/tmp}/gryph-$1-XXXXXX")
  pids=()
  broker_flags=()
  declare -gA pid_of
  trap process_test_cleanup EXIT
}

process_test_cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if declare -F on_cleanup >/dev/null; then on_cleanup; fi
  if [ -n "${GRYPH_KEEP:-}" ]; then echo "kept $dir"; else rm -rf "$dir"; fi
}

track() {
  pid_of[$1]=$!
  pids+=($!)
}

forget() {
  local keep=()
  for p in "${pids[@]}"; do [ "$p" != "$1" ] && keep+=("$p"); done
  pids=("${keep[@]}")
}

fail() {
  echo "FAILED: $*" >&2
  for f in "$dir"/*.log; do echo "--- $f"; tail -15 "$f"; done >&2
  exit 1
}

nap() { sleep "$(( $1 + RANDOM % ($2 - $1 + 1) ))e-1"; }

kill9() {
  kill -0 "${pid_of[$1]}" 2>/dev/null || fail "$1 exited by itself"
  echo "SIGKILL $1"
  kill -9 "${pid_of[$1]}"
  wait "${pid_of[$1]}" 2>/dev/null || true
  forget "${pid_of[$1]}"
}

stop() {
  kill -TERM "${pid_of[$1]}"
  wait "${pid_of[$1]}" || fail "$1 did not exit cleanly on SIGTERM"
  forget "${pid_of[$1]}"
}

await_exit() {
  local pid=${pid_of[$1]}
  for _ in $(seq "$2"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "$1 did not finish"
  wait "$pid" || fail "$1 exited non-zero"
  forget "$pid"
}

# 0: holds; 1: not WANT events; 2: one twice; 3: one FILTER rejects; 4: out of tick order.
matches_verdict() {
  local file=$1 want=$2 filter=$3 seqs ticks
  seqs=$(grep -o '"seq":[0-9]*' "$file" | cut -d: -f2)
  [ "$(echo "$seqs" | grep -c .)" -eq "$want" ] || return 1
  [ "$(echo "$seqs" | sort -n | uniq | grep -c .)" -eq "$want" ] || return 2
  [ -z "$(echo "$seqs" | awk "{ s = \$1 } !($filter)")" ] || return 3
  ticks=$(grep -o '"tick":[0-9]*' "$file" | cut -d: -f2)
  [ "$ticks" = "$(echo "$ticks" | sort -n -u)" ] || return 4
}

check_matches() {
  local file=$1 want=$2 filter=$3 verdict=1
  for _ in $(seq 120); do
    if matches_verdict "$file" "$want" "$filter"; then verdict=0; break; else verdict=$?; fi
    sleep 0.5
  done
  local name lines
  name=$(basename "$file")
  lines=$(wc -l <"$file")
  case $verdict in
    0) echo "$name: exactly once, $want matching events in tick order" ;;
    1) fail "$name holds $lines lines, not the $want matching events" ;;
    2) fail "$name holds an event twice" ;;
    3) fail "$name holds an event its selector does not match" ;;
    4) fail "$name's events are not in tick order" ;;
  esac
}

endpoint_of() {
  for _ in $(seq 100); do
    local e
    e=$(sed -n 's/.* listening on \(tcp:[^ ]*\) .*/\1/p' "$1" | head -1)
    [ -n "$e" ] && { echo "$e"; return 0; }
    sleep 0.1
  done
  return 1
}

start_broker() {
  case $1 in
    phb) "$bin/gryph-broker" --role=phb --data_dir="$dir/phb" --listen="${listen_of[phb]}" \
           --downstream=shb "${common[@]}" "${broker_flags[@]}" 2>>"$dir/phb.log" & ;;
    shb) "$bin/gryph-broker" --role=shb --data_dir="$dir/shb" --listen="${listen_of[shb]}" \
           --upstream="phb@${listen_of[phb]}" --session_timeout=5s "${common[@]}" \
           "${broker_flags[@]}" 2>>"$dir/shb.log" & ;;
  esac
}
