# The helpers of examples/demo.sh (sourced; tests/test_demo.py runs them on their own): a header per step with the
# time elapsed, and `run`, which keeps a tool's whole output in a log and shows the lines worth reading as they come.
# Expects: started (SECONDS at the start), steps (how many), n (steps done).

elapsed() { local s=$((SECONDS - started)); printf '%d:%02d' $((s / 60)) $((s % 60)); }
step() { n=$((n + 1)); printf '\n== [%d/%d, %s elapsed] %s\n' "$n" "$steps" "$(elapsed)" "$*"; }
# run LOG PATTERN CMD...: CMD's output goes whole to LOG; lines matching PATTERN are shown as they come; a command
# that fails ends the demo with its exit status and the log's name
run() {
  local log=$1 pattern=$2
  shift 2
  local rc=0
  : > "$log"
  "$@" >> "$log" 2>&1 &
  local pid=$!
  tail -n +1 -f --pid="$pid" "$log" | grep --line-buffered -E "$pattern" || true
  wait "$pid" || rc=$?
  if [ "$rc" != 0 ]; then echo "failed (exit $rc): see $log" >&2; exit "$rc"; fi
}
