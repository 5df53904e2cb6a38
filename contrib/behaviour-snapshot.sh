#!/usr/bin/env bash
# What accountd shows the world, written into one folder so that two builds can be compared byte
# for byte (`diff -r`): every `--help` (each command and subcommand, -h and --help), the man pages,
# the completions of five shells, every report in every format over a database ingested from a
# deterministic synthetic sacct history, and `accountd replay`'s JSON and table over that
# database and over the synthetic year of contrib/bench/gen-year.py. For changes that must not
# change behaviour (issue 28: moving code between files, modules and crates).
#
#   contrib/behaviour-snapshot.sh OUT [ACCOUNTD]     ACCOUNTD default target/release/accountd
#
# Environment: RECORDS (sacct records, 20000), YEAR_JOBS (jobs of the synthetic year, 400000;
# 0 leaves the year out), WORK (generated inputs, kept between runs: /tmp/teamshare-snapshot).
# Everything runs with TZ=UTC. Exits non-zero if any command fails unexpectedly.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
OUT=${1:?usage: behaviour-snapshot.sh OUT [ACCOUNTD]}
BIN=${2:-$ROOT/target/release/accountd}
RECORDS=${RECORDS:-20000}
YEAR_JOBS=${YEAR_JOBS:-400000}
WORK=${WORK:-/tmp/teamshare-snapshot}
export TZ=UTC
[[ -x $BIN ]] || { echo "behaviour-snapshot: no accountd at $BIN" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT/help" "$OUT/man" "$OUT/completions" "$OUT/reports" "$OUT/replay" "$WORK/bin"

# Every command's help, walking the "Commands:" lists of the help texts.
help_of() { # words of the command...
    local name=${*:-accountd}
    name=${name// /-}
    "$BIN" "$@" --help >"$OUT/help/$name.txt" 2>&1 || true
    "$BIN" "$@" -h >"$OUT/help/$name.short.txt" 2>&1 || true
    local sub
    for sub in $(sed -n '/^Commands:/,/^$/p' "$OUT/help/$name.txt" | awk 'NR > 1 && NF { print $1 }'); do
        [[ $sub == help ]] || help_of "$@" "$sub"
    done
}
help_of
"$BIN" --version >"$OUT/help/version.txt"
"$BIN" generate man "$OUT/man" >"$OUT/man/paths.txt"
sed -i "s|$OUT|OUT|g" "$OUT/man/paths.txt"
for shell in bash zsh fish elvish powershell; do
    "$BIN" generate completions "$shell" >"$OUT/completions/$shell"
done

# A database ingested from a deterministic sacct history, through a fake sacct on PATH.
CONFIG=$ROOT/tests/live/teamshare.toml
DATA=$WORK/sacct-$RECORDS.txt
[[ -s $DATA ]] || python3 "$ROOT/contrib/bench/gen-sacct.py" --records "$RECORDS" --seed 7 \
    --end 1764547200 --days 60 >"$DATA"
printf '#!/bin/sh\nexec cat %q\n' "$DATA" >"$WORK/bin/sacct"
chmod +x "$WORK/bin/sacct"
: >"$WORK/slurm.conf"
DB=$WORK/snapshot.db
rm -f "$DB" "$DB-wal" "$DB-shm"
run() { # label, accountd arguments...: stdout, stderr and the exit status
    local label=$1 rc=0
    shift
    PATH=$WORK/bin:$PATH SLURM_CONF=$WORK/slurm.conf "$BIN" --config "$CONFIG" --database "$DB" "$@" \
        >"$OUT/$label.out" 2>"$OUT/$label.err" || rc=$?
    echo "$rc" >"$OUT/$label.rc"
}
run reports/ingest ingest --since 2025-09-01 --until 2025-12-01
sed -i -E 's/[0-9]+(\.[0-9]+)? ?m?s\b/T/g' "$OUT/reports/ingest.err" # its timings
PERIOD=(--since 2025-10-01 --until 2025-12-01)
for fmt in table csv json html; do
    run "reports/teams.$fmt" report teams --format "$fmt" "${PERIOD[@]}"
    run "reports/teams-by-day.$fmt" report teams --by-day --format "$fmt" --since 2025-11-25 --until 2025-12-01
    for kind in jobs users utilisation fairshare; do
        run "reports/$kind.$fmt" report "$kind" --format "$fmt" "${PERIOD[@]}"
    done
done
run reports/teams-by-type.table report teams --by-type "${PERIOD[@]}"
run reports/teams-one-team.table report teams --team training "${PERIOD[@]}"
run reports/check-config check-config --capacity 12
for fmt in table json; do
    run "replay/history.$fmt" replay "${PERIOD[@]}" --capacity 576 --gpus-per-node 8 --format "$fmt"
done

# The synthetic year (contrib/bench/gen-year.py, seed 13), two candidates, JSON.
if ((YEAR_JOBS > 0)); then
    YEAR=$WORK/year-$YEAR_JOBS
    [[ -s $YEAR/year.swf ]] || python3 "$ROOT/contrib/bench/gen-year.py" "$YEAR" --seed 13 \
        --jobs "$YEAR_JOBS" 2>/dev/null
    for cand in siloed "$ROOT/contrib/bench/replay-1000-alt.toml"; do
        label=year-$(basename "$cand" .toml)
        "$BIN" --config "$ROOT/contrib/bench/replay-1000.toml" replay --swf "$YEAR/year.swf" \
            --team-map "$YEAR/team-map.txt" --skip-calibration --format json --candidate "$cand" \
            >"$OUT/replay/$label.json" 2>"$OUT/replay/$label.err" || echo "rc $?" >>"$OUT/replay/$label.err"
    done
fi
# Paths of this run's inputs are not behaviour.
grep -rlF "$WORK" "$OUT" | xargs -r sed -i "s|$WORK|WORK|g"
grep -rlF "$ROOT" "$OUT" | xargs -r sed -i "s|$ROOT|ROOT|g"
echo "behaviour-snapshot: $(find "$OUT" -type f | wc -l) files in $OUT"
