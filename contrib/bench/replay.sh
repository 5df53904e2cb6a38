#!/bin/bash
# Benchmark: `accountd replay` of a synthetic year of a 1,000-GPU site (contrib/bench/gen-year.py:
# ~400,000 jobs of 5 teams, 125 nodes x 8 GPUs) from its SWF file: the wall time, CPU time and
# max RSS of one replay per candidate (siloed, contrib/bench/replay-1000.toml and
# replay-1000-alt.toml, which moves 64 GPUs of quota from training to vision) and of a 10-point
# capacity curve of replay-1000.toml, with the load average before and after each.
#
#   contrib/bench/replay.sh [DIR]        DIR default target/bench-replay
#
# Builds accountd in release (`cargo build --release -p accountd`) unless ACCOUNTD names a binary
# (then builds nothing). The year is generated into DIR once per SEED and JOBS, and kept.
# Environment: ACCOUNTD, SEED (13), JOBS (400000), CURVE (10: points of the capacity curve;
# 0 skips it), FORMAT (table), WHOLE_NODE (1: the whole-node-heavy variant of the year,
# gen-year.py --whole-node). Each replay's output: DIR/replay-<label>.txt (stderr .err).
set -euo pipefail

# shellcheck source=contrib/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # bench_log, bench_die, bench_machine, bench_load
ROOT=$BENCH_ROOT
DIR=${1:-$ROOT/target/bench-replay}
SEED=${SEED:-13}
JOBS=${JOBS:-400000}
CURVE=${CURVE:-10}
FORMAT=${FORMAT:-table}
WHOLE_NODE=${WHOLE_NODE:-0}
GEN_ARGS=()
[[ $WHOLE_NODE == 1 ]] && GEN_ARGS=(--whole-node)
CONFIG=$ROOT/contrib/bench/replay-1000.toml
ALT=$ROOT/contrib/bench/replay-1000-alt.toml
mkdir -p "$DIR/bin"

if [[ -z ${ACCOUNTD:-} ]]; then
    bench_log "building accountd (cargo build --release -p accountd)"
    (cd "$ROOT" && cargo build --release -p accountd)
    ACCOUNTD=${CARGO_TARGET_DIR:-$ROOT/target}/release/accountd
fi
[[ -x $ACCOUNTD ]] || bench_die "no accountd at $ACCOUNTD"
# A copy: a rebuild elsewhere during the run changes nothing.
cp "$ACCOUNTD" "$DIR/bin/accountd"
BIN=$DIR/bin/accountd
bench_log "accountd: $ACCOUNTD ($(stat -c %y "$ACCOUNTD" | cut -d. -f1))"

# The candidates must parse (the capacity is given: there is no Slurm to measure it with).
for toml in "$CONFIG" "$ALT"; do
    "$BIN" --config "$toml" check-config --capacity 1000 >"$DIR/check-$(basename "$toml" .toml).txt" 2>&1 ||
        { cat "$DIR/check-$(basename "$toml" .toml).txt" >&2; bench_die "$toml does not check"; }
done

SWF=$DIR/year.swf
MAP=$DIR/team-map.txt
STAMP="seed $SEED jobs $JOBS ${GEN_ARGS[*]} $(sha256sum "$ROOT/contrib/bench/gen-year.py" | cut -c1-16)"
if [[ ! -s $SWF || ! -s $MAP || $(cat "$DIR/generated" 2>/dev/null) != "$STAMP" ]]; then
    bench_log "generating the year ($STAMP) into $DIR"
    start=$(date +%s.%N)
    python3 "$ROOT/contrib/bench/gen-year.py" "$DIR" --seed "$SEED" --jobs "$JOBS" "${GEN_ARGS[@]}" 2>"$DIR/generated.txt"
    echo "$STAMP" >"$DIR/generated"
    bench_log "generated in $(echo "$(date +%s.%N) - $start" | bc -l | xargs printf '%.1f') s"
fi
sed 's/^/  /' "$DIR/generated.txt"

"$BIN" replay --help >/dev/null 2>&1 ||
    bench_die "$BIN has no \`replay\` command (yet): everything up to it is ready in $DIR"

TIMING=/usr/bin/time
[[ -x $TIMING ]] || { TIMING=; bench_log "/usr/bin/time is missing (apt-get install time): wall times only"; }

echo "$(bench_machine)"
echo "trace: $SWF ($(du -m "$SWF" | cut -f1) MiB, $(grep -vc '^;' "$SWF") jobs)"
printf '%-22s %10s %10s %10s %10s  %-16s %-16s\n' run "wall s" "user s" "sys s" "max RSS" "load before" "load after"

replay() { # label, replay arguments...
    local label=$1 out=$DIR/replay-$1.txt err=$DIR/replay-$1.err tfile=$DIR/time-$1.txt
    shift
    local cmd=("$BIN" --config "$CONFIG" replay --swf "$SWF" --team-map "$MAP" --skip-calibration --format "$FORMAT" "$@")
    local before after wall user sys rss rc=0
    before=$(bench_load)
    if [[ -n $TIMING ]]; then
        "$TIMING" -v -o "$tfile" "${cmd[@]}" >"$out" 2>"$err" || rc=$?
        wall=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' "$tfile")
        user=$(awk -F': ' '/User time/ { print $2 }' "$tfile")
        sys=$(awk -F': ' '/System time/ { print $2 }' "$tfile")
        rss="$(awk -F': ' '/Maximum resident set size/ { printf "%.0f", $2 / 1024 }' "$tfile") MiB"
    else
        local t0 t1
        t0=$(date +%s.%N)
        "${cmd[@]}" >"$out" 2>"$err" || rc=$?
        t1=$(date +%s.%N)
        wall=$(echo "$t1 - $t0" | bc -l)
        user=- sys=- rss=-
    fi
    after=$(bench_load)
    printf '%-22s %10.2f %10s %10s %10s  %-16s %-16s\n' "$label" "$wall" "$user" "$sys" "$rss" "$before" "$after"
    if ((rc != 0)); then
        echo "  accountd replay ($label) failed with status $rc: ${cmd[*]}" >&2
        sed 's/^/  /' "$err" | tail -20 >&2
        return "$rc"
    fi
}

status=0
replay siloed --candidate siloed || status=1
replay replay-1000 --candidate "$CONFIG" || status=1
replay replay-1000-alt --candidate "$ALT" || status=1
if ((CURVE > 0)); then
    replay "capacity-curve-$CURVE" --candidate "$CONFIG" --capacity-curve "$CURVE" || status=1
fi
echo "outputs: $DIR/replay-*.txt"
exit "$status"
