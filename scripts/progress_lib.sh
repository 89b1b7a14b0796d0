# Progress for long shell steps, sourced by examples/demo.sh (make demo) and the Makefile's setup: a header per step
# with the time elapsed, and `run`, which keeps a tool's whole output in a log, shows the lines worth reading as
# they come, and says the step is still running when nothing was shown for PROGRESS_QUIET_S seconds (default 30):
# on a machine shared with other jobs a step can take minutes, and a silent one looks hung.
# tests/test_demo.py runs these helpers on their own.
# Expects: started (SECONDS at the start), steps (how many), n (steps done).

elapsed() { local s=$((SECONDS - started)); printf '%d:%02d' $((s / 60)) $((s % 60)); }
step() { n=$((n + 1)); printf '\n== [%d/%d, %s elapsed] %s\n' "$n" "$steps" "$(elapsed)" "$*"; }
# run LOG PATTERN CMD...: CMD's output goes whole to LOG; lines matching PATTERN are shown as they come, and a
# "still running" line after each PROGRESS_QUIET_S seconds without one; a command that fails ends the script with
# its exit status and the log's name. The output reaches the reader through a pipe, so its end is the command's
# end: following the log with `tail --pid` waited up to PROGRESS_QUIET_S more for a command bash had not yet reaped
# (a zombie still answers kill -0), and a second on every command for tail's poll.
run() {
  local log=$1 pattern=$2
  shift 2
  local rc line status quiet=${PROGRESS_QUIET_S:-30} rc_file
  rc_file=$(mktemp)
  while true; do
    if IFS= read -r -t "$quiet" line; then
      printf '%s\n' "$line"
    else
      status=$?
      [ "$status" -gt 128 ] || break  # end of the output; above 128: the read timed out
      printf '   ... still running (%s elapsed; its whole output: %s)\n' "$(elapsed)" "$log"
    fi
  done < <({
    local code=0
    "$@" || code=$?
    echo "$code" > "$rc_file"
  } 2>&1 | tee "$log" | { grep --line-buffered -E "$pattern" || true; })
  rc=$(cat "$rc_file")
  rm -f "$rc_file"
  if [ "${rc:-1}" != 0 ]; then echo "failed (exit ${rc:-1}): see $log" >&2; exit "${rc:-1}"; fi
}
# cpu_minutes: the CPU time (user + system, in minutes, one decimal) of this shell's finished children and their
# descendants, printed (bash's `times`, which must run in this shell: a $(...) would count its own children only)
cpu_minutes() {
  local f
  f=$(mktemp)
  times > "$f"
  awk 'NR == 2 {
    t = 0
    for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); t += p[1] * 60 + p[2] }
    printf "%.1f", t / 60
  }' "$f"
  rm -f "$f"
}
