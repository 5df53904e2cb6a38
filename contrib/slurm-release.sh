#!/usr/bin/env bash
# The Slurm releases teamshare supports, and a machine of each to build and test against.
#
#   contrib/slurm-release.sh list              the supported releases, one per line
#   contrib/slurm-release.sh native            the release installed on this host ("" if none)
#   contrib/slurm-release.sh root REL          make REL's root ready; print its path ("/": host)
#   contrib/slurm-release.sh build REL         build the plugin (release and test-panic) and
#                                              accountd against REL; print the directory holding
#                                              accountd, libjob_submit_teamshare.so and
#                                              libjob_submit_teamshare-test-panic.so
#   contrib/slurm-release.sh exec REL CMD...   run CMD in REL's root, as root, in the checkout
#
# The release the host's packages install (22.05 on Debian 12) runs natively. The others run in
# a runtime-only Debian root (mmdebstrap, made once and kept under $TEAMSHARE_CACHE, default
# /var/cache/teamshare): 24.11 from trixie, 26.05 from testing. `exec` enters it in private
# mount and PID namespaces, so its mounts and processes vanish with it. The checkout is mounted
# at the same path inside (the test binary knows its source directory by path).
#
# Rust runs on the host only: the plugin and accountd are built here against a copy of the
# release's headers (slurm/ only: pointing at the root's usr/include would pick up its libc
# headers) and linked against its libslurm, one target directory per release.
set -Eeuo pipefail
CALLER_PWD=$PWD
cd "$(dirname "$0")/.."
REPO=$(pwd -P)

# ------------------------------------------------------------- the list
# Release, Debian suite, apt options. Keep in step with SUPPORTED in slurm-sys/src/release.rs.
RELEASES=(
    "22.05 bookworm"
    "24.11 trixie"
    "26.05 testing"
)
# What a root holds: Slurm's daemons and clients, its headers and libslurm (the builds), and
# what the cluster script, the live tests and the benchmarks run (prometheus and promtool: the
# monitoring scenario; promtool is a package of its own from trixie on, part of prometheus
# before). A root made from another list is remade.
PACKAGES=slurmctld,slurmd,slurmdbd,slurm-client,libslurm-dev,slurm-wlm-basic-plugins,slurm-wlm-mysql-plugin,munge,mariadb-server,mariadb-client,python3,procps,util-linux,binutils,hostname,passwd,bc,time,prometheus
packages_of() { # suite
    if [[ $1 == bullseye || $1 == bookworm ]]; then echo "$PACKAGES"; else echo "$PACKAGES,promtool"; fi
}
CACHE=${TEAMSHARE_CACHE:-/var/cache/teamshare}

die() { echo "slurm-release: $*" >&2; exit 1; }
say() { echo "slurm-release: $*" >&2; }

suite_of() {
    local r
    for r in "${RELEASES[@]}"; do
        if [[ ${r%% *} == "$1" ]]; then echo "${r#* }"; return 0; fi
    done
    die "Slurm $1 is not supported; supported: $(list | tr '\n' ' ')"
}
list() { local r; for r in "${RELEASES[@]}"; do echo "${r%% *}"; done; }

# The major.minor of the Slurm whose headers are under $1/usr/include/slurm ("" if none).
release_at() {
    local h=$1/usr/include/slurm/slurm_version.h v
    [[ -f $h ]] || return 0
    v=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$h")
    [[ $v =~ ^0x[0-9a-fA-F]+$ ]] || return 0
    printf '%d.%02d\n' $(((v >> 16) & 0xff)) $(((v >> 8) & 0xff))
}
native() { release_at /; }

# The Debian mirror of the host's apt sources (deb822 or one-line format).
mirror() {
    local m
    m=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [[ -n $m ]] || m=$(awk '$1 == "deb" && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
    echo "${m:-http://deb.debian.org/debian}"
}

# ------------------------------------------------------------- a root per release
root_dir() { echo "$CACHE/root-$1"; }

make_root() { # release: build the root once (about 70 s), reuse it after
    local rel=$1 suite dir tmp m opts=()
    suite=$(suite_of "$rel")
    dir=$(root_dir "$rel")
    if [[ -f $dir/.teamshare-root ]]; then
        if [[ $(<"$dir/.teamshare-root") == "$(packages_of "$suite")" ]]; then
            [[ $(release_at "$dir") == "$rel" ]] ||
                die "$dir holds Slurm $(release_at "$dir"), not $rel; remove it to rebuild"
            return 0
        fi
        say "$dir was made with other packages: making it again"
        rm -rf "$dir"
    fi
    command -v mmdebstrap >/dev/null || {
        say "installing mmdebstrap"
        { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap; } >/dev/null ||
            die "cannot install mmdebstrap"
    }
    m=$(mirror)
    # testing's Release files may be past their Valid-Until on a mirror snapshot.
    [[ $suite == testing || $suite == sid ]] && opts+=(--aptopt='Acquire::Check-Valid-Until "false"')
    mkdir -p "$CACHE"
    tmp=$dir.tmp.$$
    rm -rf "$tmp"
    say "making a Debian $suite root with Slurm $rel in $dir (once; about a minute)"
    local t0=$SECONDS
    mmdebstrap --mode=root --variant=apt "${opts[@]}" \
        --include="$(packages_of "$suite")" \
        "$suite" "$tmp" "deb $m $suite main" >"$CACHE/root-$rel.log" 2>&1 ||
        { tail -n 20 "$CACHE/root-$rel.log" >&2; rm -rf "$tmp"; die "mmdebstrap $suite failed (log: $CACHE/root-$rel.log)"; }
    [[ $(release_at "$tmp") == "$rel" ]] ||
        { rm -rf "$tmp"; die "Debian $suite now ships Slurm $(release_at "$tmp"), not $rel: update RELEASES in $0"; }
    packages_of "$suite" >"$tmp/.teamshare-root"
    mv "$tmp" "$dir"
    say "root for Slurm $rel ready in $((SECONDS - t0)) s"
}

root() {
    if [[ $(native) == "$1" ]]; then echo /; return; fi
    suite_of "$1" >/dev/null
    make_root "$1"
    root_dir "$1"
}

# ------------------------------------------------------------- builds
build() { # release: print the directory of its binaries
    local rel=$1 out target inc lib r
    export PATH="$HOME/.cargo/bin:$PATH"
    if [[ $(native) == "$rel" ]]; then
        target=$REPO/target
        out=$REPO/target/release
        cargo build --release --locked -p job-submit-teamshare --features test-panic >&2
        cp "$out/libjob_submit_teamshare.so" "$out/libjob_submit_teamshare-test-panic.so"
        cargo build --release --locked -p job-submit-teamshare -p accountd >&2
        echo "$out"
        return
    fi
    r=$(root "$rel")
    target=$REPO/target/slurm-$rel
    inc=$target/include
    lib=$(dirname "$(readlink -f "$r/usr/lib/x86_64-linux-gnu/libslurm.so" 2>/dev/null || find "$r/usr/lib" -name 'libslurm.so' | head -n 1)")
    [[ -d $lib ]] || die "no libslurm.so in the root of Slurm $rel"
    rm -rf "$inc" && mkdir -p "$inc" && cp -a "$r/usr/include/slurm" "$inc/"
    # libslurm of a newer Debian needs a newer glibc than the host's: the linker need not resolve
    # its own dependencies here (they resolve in the root, where it runs).
    export SLURM_INCLUDE_DIR=$inc SLURM_LIB_DIR=$lib CARGO_TARGET_DIR=$target
    export RUSTFLAGS="${RUSTFLAGS:-} -C link-arg=-Wl,--allow-shlib-undefined"
    cargo build --release --locked -p job-submit-teamshare --features test-panic >&2
    cp "$target/release/libjob_submit_teamshare.so" "$target/release/libjob_submit_teamshare-test-panic.so"
    cargo build --release --locked -p job-submit-teamshare -p accountd >&2
    echo "$target/release"
}

# ------------------------------------------------------------- running inside
exec_in() { # release cmd...
    local rel=$1 r v pass=()
    shift
    r=$(root "$rel")
    if [[ $r == / ]]; then exec "$@"; fi
    # The environment a command inside sees: a clean one, plus the project's own variables.
    for v in $(compgen -e); do
        if [[ $v =~ ^(TEAMSHARE_|LIVE_|CI$|RUST_BACKTRACE$|RUST_LOG$) ]]; then pass+=("$v=${!v}"); fi
    done
    # Everything below happens in new mount and PID namespaces: the mounts vanish with it, and
    # so does every process it started (the daemons of a cluster a crashed test left behind).
    # The network is the host's: a separate one would need an address besides loopback for
    # slurmdbd to bind (getaddrinfo with AI_ADDRCONFIG), so suites side by side use other ports.
    exec unshare --mount --pid --fork --propagation private -- /bin/bash -Eeuo pipefail -c '
        r=$1 repo=$2 cwd=$3 n=$4; shift 4
        vars=("${@:1:n}"); shift "$n"
        mount -t proc proc "$r/proc"
        mount -t sysfs sysfs "$r/sys"
        mount --rbind /sys/fs/cgroup "$r/sys/fs/cgroup"   # slurmd 24.11+ needs cgroups
        mount --bind /dev "$r/dev"
        mount -t devpts devpts "$r/dev/pts" -o newinstance,ptmxmode=0666
        mount -t tmpfs tmpfs "$r/dev/shm"
        mount -t tmpfs tmpfs "$r/tmp"
        mkdir -p "$r$repo"
        mount --bind "$repo" "$r$repo"
        cp /etc/hosts "$r/etc/hosts"
        hostname > "$r/etc/hostname"
        # Not exec: this shell stays PID 1 of the namespace and reaps the daemons orphaned to it.
        chroot "$r" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            HOME=/root LANG=C.UTF-8 "${vars[@]}" /bin/bash -c "cd \"\$0\" && exec \"\$@\"" "$cwd" "$@"
    ' bash "$r" "$REPO" "$CALLER_PWD" "${#pass[@]}" "${pass[@]}" "$@"
}

case "${1:-}" in
    list) list ;;
    native) native ;;
    root) [[ $# -eq 2 ]] || die "usage: $0 root RELEASE"; root "$2" ;;
    build) [[ $# -eq 2 ]] || die "usage: $0 build RELEASE"; build "$2" ;;
    exec) [[ $# -ge 3 ]] || die "usage: $0 exec RELEASE CMD..."; rel=$2; shift 2; exec_in "$rel" "$@" ;;
    *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
