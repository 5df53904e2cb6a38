#!/usr/bin/env bash
# Soak: the adversarial live scenario (tests/live/adversarial/,
# adversarial::a01_hostile_member_cannot_break_governance) at 10,000 submissions instead of the
# CI suite's 75 s. An unprivileged member of every team submits and modifies at random while
# root's team jobs come and go and `accountd run` governs every 500 ms; the scenario samples
# the ceilings every 0.5 s and compares every job's runs with what explains them at the end.
#
#   contrib/bench/soak.sh                              # 10,000 submissions (about 1 h on 2 cores)
#   ADVERSARY_SUBMISSIONS=300 contrib/bench/soak.sh    # a short check of the script
#
# The property soaks of everything teamshare parses (10^6 cases per property, no cluster) are
# contrib/bench/property-soak.sh.
#
# It builds what the live tests need (NO_BUILD=1 skips that), runs the live test binary filtered
# to that one scenario on a cluster of its own (DIR, default /tmp/teamshare-bench-soak, on the
# benchmark ports of lib.sh), prints the figures and adds a row to the table of section 7 of
# docs/benchmarks.md (NO_DOC=1 skips that), with the date, commit, seed and the load average.
# Exit status: the scenario's (non-zero when a must-be-zero figure is not zero).
#
# Environment: ADVERSARY_SUBMISSIONS (10000), ADVERSARY_SECS (no time bound), ADVERSARY_SEED
# (random; the scenario prints it), ADVERSARY_PACE_MS (40), ADVERSARY_MAX_QUEUE (60), ports
# (lib.sh). The cluster's teamshare.toml is tests/live/teamshare.toml, whose metrics port
# (29477) is the live tests' own: the script refuses to run while a live test run is going on.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=${1:-/tmp/teamshare-bench-soak}
export ADVERSARY_SUBMISSIONS=${ADVERSARY_SUBMISSIONS:-10000}
SCENARIO=adversarial::a01_hostile_member_cannot_break_governance
DOC=$BENCH_ROOT/docs/benchmarks.md
[[ $(id -u) == 0 ]] || bench_die "run as root (the throwaway cluster runs as root)"
case $DIR in
    /tmp/teamshare-bench-*) ;;
    *) bench_die "benchmark clusters live under /tmp/teamshare-bench-* (got $DIR)" ;;
esac
if ss -ltnH 2>/dev/null | awk '{ print $4 }' | grep -qE ':(29477|26817)$'; then
    bench_die "a live test run is going on (port 29477 or 26817 is in use); run the soak after it"
fi

cd "$BENCH_ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
if [[ ${NO_BUILD:-0} != 1 ]]; then
    bench_log "building the plugin (test-panic), the workspace and the live tests"
    cargo build --release --locked -p job-submit-teamshare --features test-panic
    mkdir -p target/live-plugin
    cp target/release/libjob_submit_teamshare.so target/live-plugin/libjob_submit_teamshare.so
    cargo build --release --locked --workspace
fi
BIN=$(cargo test --release --locked -p teamshare-live-tests --no-run 2>&1 |
    sed -n 's/.*Executable live\/main.rs (\(.*\))$/\1/p' | tail -1)
[[ -n $BIN && -x $BIN ]] || bench_die "no live test binary (cargo test --no-run printed none)"

# The binaries under test, copied so that a rebuild by someone else changes nothing meanwhile.
mkdir -p "$DIR-bin"
cp "$BIN" "$DIR-bin/live"
cp target/live-plugin/libjob_submit_teamshare.so "$DIR-bin/libjob_submit_teamshare.so"

COMMIT=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- accountd plugin config tests 2>/dev/null || COMMIT="$COMMIT+changes"
LOAD_BEFORE=$(bench_load)
REPORT=$DIR.report
LOG=$DIR.log
rm -f "$REPORT"
bench_log "$(bench_machine); load $LOAD_BEFORE; commit $COMMIT"
bench_log "running $SCENARIO: $ADVERSARY_SUBMISSIONS submissions (log: $LOG)"
T0=$SECONDS
set +e
TEAMSHARE_PLUGIN=$DIR-bin/libjob_submit_teamshare.so \
    TEAMSHARE_LIVE_DIR=$DIR \
    LIVE_SLURMCTLD_PORT=$SLURMCTLD_PORT LIVE_SLURMDBD_PORT=$SLURMDBD_PORT \
    LIVE_MARIADB_PORT=$MARIADB_PORT LIVE_SLURMD_PORT_BASE=$SLURMD_PORT_BASE \
    ADVERSARY_REPORT=$REPORT \
    "$DIR-bin/live" --exact "$SCENARIO" 2>&1 | tee "$LOG"
RC=${PIPESTATUS[0]}
set -e
ELAPSED=$((SECONDS - T0))
LOAD_AFTER=$(bench_load)
[[ -s $REPORT ]] || bench_die "the scenario wrote no figures (exit $RC); see $LOG and target/live-logs"

fig() { sed -n "s/^$1=//p" "$REPORT" | head -1; }
echo
echo "soak: $(fig submissions) submissions, $(fig accepted) accepted, $(fig refused) refused, in $ELAPSED s"
echo "refusals by reason:"
sed -n 's/^refusal: \(.*\)=\([0-9]*\)$/  \2  \1/p' "$REPORT" | sort -rn
for k in ceiling_violations outside_team_gpu_samples jobs_ran_twice queued_again \
    unexplained_extra_runs slurmctld_restarts slurmctld_down_samples slurmctld_unanswered_samples \
    missed_passes govern_failures cross_user_accepted invalid_edits_not_refused \
    jobs_stranded_by_a_hold runs_lost_from_the_database; do
    printf '  %-30s %s\n' "$k" "$(fig "$k")"
done
echo "  administrator: $(fig admin_edits_valid) valid and $(fig admin_edits_invalid) invalid edits; $(fig metrics_floods) /metrics floods"
echo "  above a ceiling under $(fig overshoot_longest_ms) ms: $(fig overshoot_samples) samples"
echo "  max pass gap $(fig max_pass_gap_ms) ms; load $LOAD_BEFORE -> $LOAD_AFTER; exit $RC"

if [[ ${NO_DOC:-0} != 1 ]]; then
    python3 - "$DOC" "$REPORT" "$RC" "$COMMIT" "$LOAD_BEFORE" "$LOAD_AFTER" "$ELAPSED" <<'EOF'
import datetime, sys
doc, report, rc, commit, load_before, load_after, elapsed = sys.argv[1:]
fig, reasons = {}, []
for line in open(report):
    key, _, value = line.rstrip("\n").rpartition("=")
    if key.startswith("refusal: "):
        reasons.append((int(value), key[len("refusal: "):]))
    else:
        fig[key] = value
g = lambda k: fig.get(k, "?")
row = "| {} | `{}` | {} | {} | {} | {} | {} ({}) | {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {} ms | {} s | {} → {} | {} |".format(
    datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), commit, g("seed"), g("submissions"),
    g("accepted"), g("refused"), g("updates"), g("updates_accepted"),
    g("admin_edits_valid"), g("admin_edits_invalid"), g("metrics_floods"),
    g("ceiling_violations"), g("jobs_ran_twice"), g("slurmctld_restarts"), g("queued_again"),
    g("unexplained_extra_runs"), g("runs_lost_from_the_database"), g("jobs_stranded_by_a_hold"),
    g("max_pass_gap_ms"), elapsed, load_before, load_after,
    "pass" if rc == "0" else "**FAIL**")
text = open(doc).read()
end = "<!-- soak-runs:end -->"
if end not in text:
    sys.exit("docs/benchmarks.md has no " + end + " (section 7)")
text = text.replace(end, row + "\n" + end, 1)
begin, stop = "<!-- soak-reasons:begin -->", "<!-- soak-reasons:end -->"
if begin in text and stop in text:
    reasons.sort(key=lambda r: (-r[0], r[1]))
    body = "\nRefusals by reason in the latest run ({}, seed {}, {} submissions):\n\n| refusals | reason (sbatch's first error; numbers as N) |\n|---|---|\n".format(
        datetime.date.today().isoformat(), g("seed"), g("submissions"))
    body += "".join("| {} | {} |\n".format(n, r.replace("|", "/")) for n, r in reasons)
    head, rest = text.split(begin, 1)
    _, tail = rest.split(stop, 1)
    text = head + begin + body + "\n" + stop + tail
open(doc, "w").write(text)
EOF
    bench_log "added the run to section 7 of docs/benchmarks.md"
fi
exit "$RC"
