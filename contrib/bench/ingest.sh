#!/bin/bash
# Benchmark: `accountd ingest` of N synthetic sacct records (default 1,000,000), first into an
# empty database, then again into the database that already holds them. A fake `sacct` on PATH
# prints a pre-generated file (contrib/bench/gen-sacct.py), so what is measured is accountd:
# reading sacct's output, parsing it and storing it. Wall time and peak memory (max RSS) come from
# /usr/bin/time -v.
#
#   contrib/bench/ingest.sh [DIR]        DIR default /tmp/teamshare-bench-ingest
#
# Environment: RECORDS (1000000), ACCOUNTD (target/release/accountd), RUNS (1: repetitions of
# each pass), PERF=1 (also `perf record` the first pass and print where its time goes).
# Builds nothing: run `cargo build --release` first.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd -P)
DIR=${1:-/tmp/teamshare-bench-ingest}
RECORDS=${RECORDS:-1000000}
RUNS=${RUNS:-1}
ACCOUNTD=${ACCOUNTD:-$ROOT/target/release/accountd}
CONFIG=$ROOT/tests/live/teamshare.toml
[[ -x $ACCOUNTD ]] || { echo "no accountd at $ACCOUNTD: run cargo build --release" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "/usr/bin/time is missing (apt-get install time)" >&2; exit 1; }
mkdir -p "$DIR/bin"
# A copy: a rebuild elsewhere does not change the binary under measurement.
cp "$ACCOUNTD" "$DIR/bin/accountd"

DATA=$DIR/sacct-$RECORDS.txt
# Fixed end (2025-12-01T00:00:00Z) and seed: every run reads the same bytes. A file written
# for another field list (accountd's FIELDS grew: issue 13) is written again.
FIELDS=$(sed -n '/^pub const FIELDS/,/^];/p' "$ROOT/accountd/crates/slurm/src/sacct.rs" | grep -c '^ *"')
if [[ ! -s $DATA || $(head -1 "$DATA" | awk -F'|' '{ print NF }') != "$FIELDS" ]]; then
    echo "generating $RECORDS sacct records into $DATA ..."
    python3 "$ROOT/contrib/bench/gen-sacct.py" --records "$RECORDS" --end 1764547200 >"$DATA.tmp"
    mv "$DATA.tmp" "$DATA"
fi
cat >"$DIR/bin/sacct" <<EOF2
#!/bin/sh
# fake sacct for contrib/bench/ingest.sh: ignores its arguments
exec cat "$DATA"
EOF2
chmod +x "$DIR/bin/sacct"
: >"$DIR/slurm.conf" # only has to be named: the fake sacct never reads it

DB=$DIR/ingest.db
rm -f "$DB" "$DB-wal" "$DB-shm"

run_pass() { # label -> one table row
    local label=$1 out=$DIR/time-$2.txt log=$DIR/accountd-$2.log
    PATH=$DIR/bin:$PATH SLURM_CONF=$DIR/slurm.conf /usr/bin/time -v -o "$out" \
        "$DIR/bin/accountd" --config "$CONFIG" --database "$DB" ingest >"$log" 2>&1 || {
        echo "accountd ingest failed:" >&2; cat "$log" >&2; exit 1; }
    local wall rss
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' "$out")
    rss=$(awk -F': ' '/Maximum resident set size/ { printf "%.0f", $2 / 1024 }' "$out")
    local user sys
    user=$(awk -F': ' '/User time/ { print $2 }' "$out")
    sys=$(awk -F': ' '/System time/ { print $2 }' "$out")
    printf '%-34s %10s %8.2f s %12.0f %8s MiB %7s s %6s s\n' "$label" "$RECORDS" "$wall" \
        "$(echo "$RECORDS / $wall" | bc -l)" "$rss" "$user" "$sys"
    grep '^ingest ' "$log" | sed 's/^/    /'
}

echo "machine: $(nproc) vCPU, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(. /etc/os-release; echo "$PRETTY_NAME"); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "accountd: $ACCOUNTD ($(stat -c %y "$ACCOUNTD" | cut -d. -f1))"
printf '%-34s %10s %10s %12s %12s %8s %8s\n' pass records wall records/s "max RSS" user sys
for ((i = 1; i <= RUNS; i++)); do
    rm -f "$DB" "$DB-wal" "$DB-shm"
    run_pass "empty database" "empty-$i"
    run_pass "again (database holds them)" "again-$i"
done
echo "database: $(du -m "$DB" | cut -f1) MiB (+ WAL $(du -m "$DB-wal" 2>/dev/null | cut -f1 || echo 0) MiB); load after: $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ ${PERF:-0} == 1 ]]; then
    command -v perf >/dev/null || { echo "perf is missing (apt-get install linux-perf)" >&2; exit 1; }
    rm -f "$DB" "$DB-wal" "$DB-shm"
    PATH=$DIR/bin:$PATH SLURM_CONF=$DIR/slurm.conf perf record -F 999 -o "$DIR/perf.data" \
        "$DIR/bin/accountd" --config "$CONFIG" --database "$DB" ingest >/dev/null 2>&1
    echo "--- perf: where the first pass spends its time (self time by symbol, top 20)"
    perf report -i "$DIR/perf.data" --no-children --sort dso,symbol --stdio 2>/dev/null |
        grep -E '^ +[0-9.]+%' | sed -E 's/[[:space:]]+-[[:space:]]+-[[:space:]]*$//' | head -20 || true
    echo "--- perf: the same samples by kind of work"
    perf report -i "$DIR/perf.data" --no-children --sort dso,symbol --stdio 2>/dev/null |
        grep -E '^ +[0-9.]+%' | awk '{ p = $1; sub("%", "", p); dso = $2; sym = ""
            for (i = 4; i <= NF; i++) { if ($i == "-") break; sym = sym " " $i }
            k = "other Rust (parsing, strings, accountd)"
            if (dso == "[kernel.kallsyms]") k = "kernel (page cache copies, WAL writes, pipe)"
            else if (sym ~ /rusqlite/) k = "rusqlite (statement cache, binding)"
            else if (sym ~ /sqlite|Btree|Vdbe|vdbe|pcache|Pcache|wal|Pager|pager|balance_|getPage|releaseMem/) k = "SQLite (B-trees, VDBE, page cache)"
            else if (sym ~ /chrono/) k = "chrono (time parsing)"
            else if (sym ~ /malloc|free|_int_|unlink_chunk|realloc|__rdl_|__rust_alloc|__rust_dealloc/) k = "allocator"
            else if (sym ~ /memmove|memcpy|memcmp|memchr|memset/) k = "libc mem*/str*"
            s[k] += p }
            END { for (k in s) printf "  %5.1f%%  %s\n", s[k], k }' | sort -rn
fi
