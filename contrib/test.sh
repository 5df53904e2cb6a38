#!/usr/bin/env bash
# Run every test: unit and in-memory tests of each crate once, then the live-cluster scenarios
# (tests/live) on every supported Slurm release: the host's natively (22.05 on Debian 12), the
# others in a Debian root each (contrib/slurm-release.sh). A live suite fails, never skips, when
# its cluster cannot start.
#
#   contrib/test.sh                      everything, every release
#   contrib/test.sh --slurm 24.11        unit tests, then the live suite on 24.11 only
#   contrib/test.sh --slurm 24.11 -- f11 ... with arguments for the live test binary (a filter)
#   contrib/test.sh --live-only ...      skip the unit tests
#
# The suites of the non-native releases run side by side with the native one (their ports are
# moved by LIVE_PORT_OFFSET); each suite's output is in target/live-<release>.log and printed
# at its end, and a failed suite keeps its clusters' logs in target/live-logs-<release>/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
REPO=$(pwd -P)

releases=()
unit=1
live_args=()
while (($#)); do
    case $1 in
        --slurm) releases+=("${2:?--slurm needs a release}"); shift 2 ;;
        --slurm=*) releases+=("${1#--slurm=}"); shift ;;
        --live-only) unit=0; shift ;;
        --) shift; live_args=("$@"); break ;;
        -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) live_args=("$@"); break ;;
    esac
done
supported=$(contrib/slurm-release.sh list)
if ((${#releases[@]} == 0)); then mapfile -t releases <<<"$supported"; fi
for r in "${releases[@]}"; do
    grep -qx -- "$r" <<<"$supported" ||
        { echo "test.sh: Slurm $r is not supported; supported: $(tr '\n' ' ' <<<"$supported")" >&2; exit 2; }
done

contrib/install-deps.sh
native=$(contrib/slurm-release.sh native)
T0=$SECONDS
stamp() { printf '[test.sh %4ds] %s\n' $((SECONDS - T0)) "$*"; }

# Gates that need no cluster: formatting, lints (warnings are errors; the unsafe-code lints are
# the workspace's, Cargo.toml) and the docs (broken links are errors).
stamp "rust-version, cargo fmt --check, layout, dependencies, clippy -D warnings, cargo doc"
# rust-version is true to Cargo.lock: no locked dependency needs a newer toolchain than it says.
cargo metadata --format-version 1 --locked | python3 -c '
import json, sys
m = json.load(sys.stdin)
ours = set(m["workspace_members"])
ver = lambda s: tuple(([int(x) for x in s.split(".")] + [0, 0])[:3])
have = min(ver(p["rust_version"]) for p in m["packages"] if p["id"] in ours)
need = max((ver(p["rust_version"]), p["name"]) for p in m["packages"]
           if p["id"] not in ours and p.get("rust_version"))
if need[0] > have:
    sys.exit(f"rust-version {have} is older than {need[1]} needs ({need[0]}): raise it in Cargo.toml")
'
cargo fmt --all -- --check
# The house's rules: rooms without cycles or imports back up, no file over 1,000 lines of
# non-test code (contrib/layout.py); licences, duplicate majors and banned crates
# (contrib/deps.py). The 80-line limit on functions is clippy's (clippy.toml).
python3 contrib/layout.py selftest
python3 contrib/layout.py check
python3 contrib/deps.py selftest
python3 contrib/deps.py
cargo clippy --release --locked --workspace --all-targets --features job-submit-teamshare/test-panic -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --release --locked --workspace --no-deps --document-private-items

# The host's build: the live tests load a plugin built with the test-only panic trigger; the
# production build (which must not contain it) is built afterwards and checked by the tests too.
stamp "building for the host's Slurm ${native:-(none)}"
cargo build --release --locked -p job-submit-teamshare --features test-panic
mkdir -p target/live-plugin
cp target/release/libjob_submit_teamshare.so target/live-plugin/libjob_submit_teamshare.so
cargo build --release --locked --workspace
live_bin=$(cargo test --release --locked --no-run -p teamshare-live-tests 2>&1 |
    grep -o 'target/release/deps/live-[a-z0-9]*' | head -n 1)
[[ -x $live_bin ]] || { echo "test.sh: cannot find the live test binary" >&2; exit 1; }

if ((unit)); then
    stamp "unit and in-memory tests"
    cargo test --release --locked --workspace --exclude teamshare-live-tests
fi

# The Debian packages of the host's build (contrib/deb/build.sh, lintian included), which the
# native suite's packaging scenario installs and purges; the other releases' suites skip it.
if [[ -n $native ]] && printf '%s\n' "${releases[@]}" | grep -qx -- "$native"; then
    stamp "Debian packages for Slurm $native (contrib/deb/build.sh)"
    contrib/deb/build.sh
fi

# The other releases' roots and builds (before any suite starts: builds take both cores).
declare -A build_dir=()
for r in "${releases[@]}"; do
    if [[ $r != "$native" ]]; then
        stamp "building for Slurm $r"
        build_dir[$r]=$(contrib/slurm-release.sh build "$r")
    fi
done

# One live suite: its output to target/live-REL.log, its exit code to target/live-REL.rc.
# The store's crash test (issue25::k01: 200 kill -9 of the daemon) runs in the native suite
# only: the store does not depend on Slurm's release, and the suites run side by side.
run_suite() { # release port-offset
    local r=$1 offset=$2 log=target/live-$1.log
    local env=(LIVE_PORT_OFFSET="$offset" LIVE_LOGS="$REPO/target/live-logs-$r"
        TEAMSHARE_LIVE_DIR="/tmp/teamshare-live-$r-$$")
    rm -rf "target/live-logs-$r"
    if [[ $r == "$native" ]]; then
        env "${env[@]}" TEAMSHARE_PLUGIN="$REPO/target/live-plugin/libjob_submit_teamshare.so" \
            "$live_bin" "${live_args[@]}" >"$log" 2>&1
    else
        env "${env[@]}" TEAMSHARE_PLUGIN="${build_dir[$r]}/libjob_submit_teamshare-test-panic.so" \
            TEAMSHARE_BUILD_DIR="${build_dir[$r]}" \
            contrib/slurm-release.sh exec "$r" "$REPO/$live_bin" "${live_args[@]}" --skip packaging:: --skip issue25::k01 \
            >"$log" 2>&1
    fi
}

declare -A pid=()
offset=0
for r in "${releases[@]}"; do
    stamp "live suite on Slurm $r (ports +$offset; output: target/live-$r.log)"
    run_suite "$r" "$offset" &
    pid[$r]=$!
    offset=$((offset + 1000))
done
failed=()
for r in "${releases[@]}"; do
    rc=0
    wait "${pid[$r]}" || rc=$?
    echo
    echo "==================== live suite on Slurm $r (exit $rc)"
    cat "target/live-$r.log"
    ((rc == 0)) || failed+=("$r")
done
stamp "done"
if ((${#failed[@]})); then
    # Each failed suite's failures again, last, where a truncated CI log still shows them.
    for r in "${failed[@]}"; do
        echo
        echo "==================== failures of the live suite on Slurm $r"
        sed -n '/^failures:/,$p' "target/live-$r.log" | tail -n 80
    done
    echo "test.sh: the live suite failed on Slurm ${failed[*]} (logs: target/live-logs-<release>/)" >&2
    exit 1
fi
