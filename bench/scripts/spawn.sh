#!/bin/bash
# Per-spawn cost of /bin/true from shells (fork+exec from a small process).
# Usage: bash spawn.sh N REPEATS [all|time]   (time: only the `time (for ...)` loop)
# Prints {"results":{method:[ms,...]}} on stdout.
N=${1:-100}
R=${2:-5}
MODE=${3:-all}

# bash, timed per iteration with $EPOCHREALTIME (microseconds).
per=()
for ((i = 0; i < 5; i++)); do /bin/true; done
[ "$MODE" = time ] && N0=0 || N0=$N
for ((i = 0; i < N0; i++)); do
  s=$EPOCHREALTIME
  /bin/true
  e=$EPOCHREALTIME
  per+=($((${e/./} - ${s/./})))
done

# bash: time (for i in $(seq N); do /bin/true; done), R times; ms per spawn = total / N.
TIMEFORMAT=%R
agg=()
for ((r = 0; r < R; r++)); do
  t=$({ time (for i in $(seq "$N"); do /bin/true; done); } 2>&1)
  agg+=("$t")
done

# dash: the same loop (the agent's /bin/sh), timed around the whole loop.
dash_agg=()
[ "$MODE" = time ] && R0=0 || R0=$R
for ((r = 0; r < R0; r++)); do
  us=$(/bin/sh -c 'n=$1; s=$(date +%s%N); i=0; while [ $i -lt $n ]; do /bin/true; i=$((i+1)); done; e=$(date +%s%N); echo $(( (e - s) / 1000 ))' sh "$N")
  dash_agg+=("$us")
done

ms_list() { printf '%s\n' "$@" | awk -v d="$DIV" '{ printf "%s%.4f", (NR > 1 ? "," : ""), $1 / d }'; }
DIV=1000 per_ms=$(ms_list "${per[@]}")
DIV=$(awk -v n="$N" 'BEGIN{print n/1000}') agg_ms=$(ms_list "${agg[@]}")
DIV=$((N * 1000)) dash_ms=$(ms_list "${dash_agg[@]}")
timed=$(printf '"bash time (for i in $(seq %d); do /bin/true; done) / %d":[%s]' "$N" "$N" "$agg_ms")
if [ "$MODE" = time ]; then
  printf '{"results":{%s}}\n' "$timed"
else
  printf '{"results":{"bash loop /bin/true (per iteration, EPOCHREALTIME)":[%s],%s,"dash while-loop /bin/true (total / %d)":[%s]}}\n' \
    "$per_ms" "$timed" "$N" "$dash_ms"
fi
