#!/usr/bin/env bash
# Build teamshare's Debian packages for the Slurm installed here, into target/debian/, as root:
#
#   teamshare-accountd_<version>_<arch>.deb  accountd, its systemd units, man pages, bash
#                                            completion; by cargo-deb from [package.metadata.deb]
#                                            of accountd/Cargo.toml
#   teamshare-plugin_<version>_<arch>.deb    job_submit_teamshare.so in slurm-wlm's PluginDir; by
#                                            dpkg-deb here, because its Depends names the exact
#                                            Slurm release of the headers it was built against
#                                            (read at build time), which cargo-deb's fixed
#                                            metadata cannot say
#
# then lintian on both: an error fails the build, warnings are printed.
#
#   contrib/deb/build.sh                 build both (release build first)
#   contrib/deb/build.sh --no-lintian    skip lintian
#
# Installs what it needs: the dev dependencies (contrib/install-deps.sh), dpkg-dev, lintian and
# cargo-deb (cargo install --locked, the version below). SLURM_INCLUDE_DIR as for cargo build.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"

CARGO_DEB_VERSION=3.8.0
OUT=target/debian
lintian=1
case ${1:-} in
    --no-lintian) lintian=0 ;;
    "") ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (--no-lintian, --help)" >&2; exit 2 ;;
esac
say() { printf '[deb] %s\n' "$*"; }
die() { echo "build.sh: $*" >&2; exit 1; }

# ------------------------------------------------------------------ tools
contrib/install-deps.sh
need=(dpkg-dev binutils)
((lintian)) && need+=(lintian)
missing=()
for p in "${need[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ $(cargo deb --version 2>/dev/null) != "cargo-deb $CARGO_DEB_VERSION" ]]; then
    say "installing cargo-deb $CARGO_DEB_VERSION (a few minutes, once)"
    cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
fi

# ------------------------------------------------------------ what we build
version=$(cargo metadata --format-version 1 --no-deps --locked | python3 -c '
import json, sys
print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "accountd"))')
deb_version=$version-1
changelog=contrib/deb/changelog
[[ $(dpkg-parsechangelog -l "$changelog" -S Version) == "$deb_version" ]] ||
    die "$changelog's latest entry is not $deb_version: add one for this version"
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
# Debian's slurm-wlm loads plugins from here (slurm.conf's PluginDir default).
plugin_dir=usr/lib/$multiarch/slurm-wlm

# The Slurm release the plugin is bound to: SLURM_VERSION_NUMBER of the headers slurm-sys reads
# (slurm-sys/build.rs), as 0xMMmmuu.
version_h=${SLURM_INCLUDE_DIR:-/usr/include}/slurm/slurm_version.h
number=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$version_h" 2>/dev/null) ||
    die "cannot read $version_h (libslurm-dev)"
[[ $number =~ ^0x[0-9a-fA-F]{6}$ ]] || die "$version_h: SLURM_VERSION_NUMBER is '$number'"
major=$((number >> 16 & 0xff)) minor=$((number >> 8 & 0xff)) micro=$((number & 0xff))
slurm=$(printf '%d.%02d.%d' "$major" "$minor" "$micro")
next=$(printf '%d.%02d.%d' "$major" "$minor" $((micro + 1)))
say "teamshare $deb_version for Slurm $slurm ($arch)"

# --------------------------------------------------------------- the build
# The production build: the test-only panic trigger (--features test-panic) must not be in it.
cargo build --release --locked --workspace
so=target/release/libjob_submit_teamshare.so
# (Its panic message is a plain string in the binary; the trigger word is not.)
! grep -qa "planted test panic" "$so" ||
    die "$so was built with the test-only panic trigger; cargo build --release without features"

mkdir -p "$OUT"
rm -f "$OUT"/teamshare-plugin_*.deb "$OUT"/teamshare-accountd_*.deb

# ------------------------------------------------------- teamshare-accountd
gen=target/release/deb
rm -rf "$gen"
mkdir -p "$gen/completions"
target/release/accountd generate man "$gen/man" >/dev/null
gzip -9n "$gen"/man/*.1
target/release/accountd generate completions bash >"$gen/completions/accountd"
cargo deb --quiet --no-build --strip -p accountd --deb-version "$deb_version" --output "$OUT" >/dev/null

# --------------------------------------------------------- teamshare-plugin
root=$OUT/teamshare-plugin-root
rm -rf "$root"
doc=$root/usr/share/doc/teamshare-plugin
install -d "$root/DEBIAN" "$root/$plugin_dir" "$doc"
install -m 0644 "$so" "$root/$plugin_dir/job_submit_teamshare.so"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/$plugin_dir/job_submit_teamshare.so"
sed -e "s|@MULTIARCH@|$multiarch|" -e "s|@SLURM_RELEASE@|$slurm|" contrib/deb/plugin/README.Debian >"$doc/README.Debian"
gzip -9n <"$changelog" >"$doc/changelog.Debian.gz"
install -m 0644 contrib/deb/copyright "$doc/copyright"
chmod 0644 "$doc"/*
install -m 0755 contrib/deb/plugin/postinst "$root/DEBIAN/postinst"
# libc and friends as dpkg-shlibdeps finds them; the symbols slurmctld itself provides
# (slurm_info, slurm_xstrdup, ...) stay unresolved, as in Slurm's own plugins.
shlibs=$(
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir "$tmp/debian" && : >"$tmp/debian/control"
    so_abs=$(pwd -P)/$root/$plugin_dir/job_submit_teamshare.so
    cd "$tmp" && dpkg-shlibdeps -O --warnings=0 "$so_abs" | sed -n 's/^shlibs:Depends=//p'
)
[[ -n $shlibs ]] || die "dpkg-shlibdeps found no dependencies for the plugin"
cat >"$root/DEBIAN/control" <<EOF
Package: teamshare-plugin
Version: $deb_version
Architecture: $arch
Maintainer: teamshare maintainers <maintainers@users.noreply.a-seed-8e459238.example>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $shlibs, slurmctld (>= $slurm), slurmctld (<< $next)
Recommends: teamshare-accountd
Section: admin
Priority: optional
Description: teamshare's job_submit plugin for Slurm $slurm
 job_submit/teamshare checks every GPU job at submit time against teamshare.toml
 (unknown teams and classes, requests that can never fit are refused with a
 one-line reason) and admits the others into teamshare's QOS with a priority
 that says whether they run in their team's quota or borrow. Built for Slurm
 $slurm only: slurmctld loads plugins of its own release alone.
 .
 Turn it on with JobSubmitPlugins=teamshare in slurm.conf (README.Debian).
EOF
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums" "$root/DEBIAN/control"
dpkg-deb --root-owner-group -Zxz --build "$root" "$OUT/teamshare-plugin_${deb_version}_$arch.deb" >/dev/null
rm -rf "$root"

debs=("$OUT/teamshare-plugin_${deb_version}_$arch.deb" "$OUT/teamshare-accountd_${deb_version}_$arch.deb")
for d in "${debs[@]}"; do
    [[ -f $d ]] || die "$d was not built"
    printf '[deb] %s (%s KiB): %s\n' "$d" $(($(stat -c %s "$d") / 1024)) "$(dpkg-deb -f "$d" Depends)"
done

# ----------------------------------------------------------------- lintian
if ((lintian)); then
    say "lintian"
    # Errors fail; warnings and the rest are shown. Running as root is what this script needs
    # (apt-get, dpkg), so lintian is told that is intended.
    lintian --allow-root --fail-on error --tag-display-limit 0 "${debs[@]}"
fi
