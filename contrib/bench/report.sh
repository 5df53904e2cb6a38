#!/bin/bash
# Benchmark: `accountd report teams --by-type` for one month over a year of a 1,000-GPU cluster
# (5 million job runs), end to end through the command line: wall time and max RSS of each run,
# with untyped quotas (contrib/bench/teamshare-1000.toml) and with quotas per GPU type
# (contrib/bench/teamshare-1000-typed.toml).
#
#   contrib/bench/report.sh [DB]        DB default /tmp/teamshare-bench-report/year-types.db
#
# The database is made by `cargo bench -p accountd --bench report` (accountd/benches/report.rs:
# 2025-01-01..2026-01-01, h100 and a100, stored through accountd's own Store), which this script
# runs when DB is missing (that one step builds). Months measured: 2025-12 (the last month of the
# data, like the default "this month" report) and 2025-06 (mid-year). The page cache is warm (the
# first, untimed run reads the file). ACCOUNTD (target/release/accountd), RUNS (5).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd -P)
DB=${1:-/tmp/teamshare-bench-report/year-types.db}
RUNS=${RUNS:-5}
ACCOUNTD=${ACCOUNTD:-$ROOT/target/release/accountd}
[[ -x $ACCOUNTD ]] || { echo "no accountd at $ACCOUNTD: run cargo build --release" >&2; exit 1; }
if [[ ! -f $DB ]]; then
    echo "no database at $DB: generating it with cargo bench -p accountd --bench report ..." >&2
    (cd "$ROOT" && cargo bench -p accountd --bench report -- --db "$DB")
fi
WORK=$(dirname "$DB")
cp "$ACCOUNTD" "$WORK/accountd"
export TZ=UTC # --since/--until dates are local midnight: make them UTC, as the data is

echo "machine: $(nproc) vCPU, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(. /etc/os-release; echo "$PRETTY_NAME"); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "database: $DB ($(du -m "$DB" | cut -f1) MiB)"
if command -v sqlite3 >/dev/null; then
    echo "rows: $(sqlite3 "$DB" 'SELECT count(*) FROM job_runs') job runs, $(sqlite3 "$DB" 'SELECT count(*) FROM job_runs WHERE gpu_types IS NOT NULL') of them typed; longest run $(sqlite3 "$DB" 'SELECT max(longest_run) FROM run_bounds') s"
    echo "query plan of Store::runs_overlapping (EXPLAIN QUERY PLAN):"
    sqlite3 "$DB" "EXPLAIN QUERY PLAN SELECT id, account, start_time, end_time, gpus, gpu_types, partition FROM job_runs
     WHERE cluster = 'teamshare-live' AND start_time < 1767225600 AND start_time >= 1764547200 - 259200
       AND end_time > 1764547200
     UNION ALL
     SELECT id, account, start_time, end_time, gpus, gpu_types, partition FROM job_runs INDEXED BY job_runs_running
     WHERE cluster = 'teamshare-live' AND end_time IS NULL AND start_time < 1767225600 AND start_time >= 1765886400" | sed 's/^/  /'
fi

printf '%-8s %-10s %-24s %8s %8s %8s %10s\n' quotas month period "min ms" "median" "max ms" "max RSS"
for quotas in untyped typed; do
    CONFIG=$ROOT/contrib/bench/teamshare-1000.toml
    [[ $quotas == typed ]] && CONFIG=$ROOT/contrib/bench/teamshare-1000-typed.toml
    for month in "2025-12 2025-12-01 2026-01-01" "2025-06 2025-06-01 2025-07-01"; do
        read -r name since until <<<"$month"
        cmd=("$WORK/accountd" --config "$CONFIG" --database "$DB" report teams --by-type --since "$since" --until "$until")
        "${cmd[@]}" >"$WORK/report-$quotas-$name.txt" 2>"$WORK/report-$quotas-$name.err" # warm-up (and the output kept)
        times=()
        rss=0
        for ((i = 0; i < RUNS; i++)); do
            /usr/bin/time -f '%e %M' -o "$WORK/time.txt" "${cmd[@]}" >/dev/null 2>&1
            read -r s kb <"$WORK/time.txt"
            times+=("$(echo "$s * 1000" | bc -l)")
            ((kb > rss)) && rss=$kb
        done
        sorted=$(printf '%s\n' "${times[@]}" | sort -n)
        min=$(head -1 <<<"$sorted")
        max=$(tail -1 <<<"$sorted")
        med=$(sed -n "$(((RUNS + 1) / 2))p" <<<"$sorted")
        printf '%-8s %-10s %-24s %8.0f %8.0f %8.0f %7.0f MiB\n' "$quotas" "$name" "$since..$until" "$min" "$med" "$max" "$(echo "$rss / 1024" | bc -l)"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "--- the 2025-12 report, quotas per GPU type (stderr, then stdout):"
cat "$WORK/report-typed-2025-12.err" "$WORK/report-typed-2025-12.txt"
