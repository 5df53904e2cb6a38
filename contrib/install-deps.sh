#!/usr/bin/env bash
# Install what building and running teamshare's dev cluster needs on Debian 12, as root.
# Idempotent: installs only what is missing.
set -euo pipefail

pkgs=(slurmctld slurmd slurmdbd slurm-client libslurm-dev slurm-wlm-basic-plugins munge
      mariadb-server mariadb-client clang libclang-dev pkg-config binutils procps python3
      mmdebstrap util-linux   # mmdebstrap, unshare: the other Slurm releases' roots (slurm-release.sh)
      prometheus              # promtool: the metrics' names and types checked (accountd/tests/metrics.rs)
      chromium poppler-utils) # the HTML report rendered, printed and read back (accountd/tests/html_chromium.rs)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}" >&2
    # Package scripts must not start system daemons: the dev cluster runs its own.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        echo "install-deps: cargo is in $HOME/.cargo/bin; add it to PATH" >&2
    else
        echo "install-deps: no Rust toolchain; installing Debian's cargo" >&2
        apt-get install -y -qq --no-install-recommends cargo rustc >/dev/null
    fi
fi

# contrib/test.sh gates formatting, lints and docs.
if command -v rustup >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/rustup" ]; then
    rustup=$(command -v rustup || echo "$HOME/.cargo/bin/rustup")
    installed=$("$rustup" component list --installed 2>/dev/null || true)
    for c in clippy rustfmt; do
        case $installed in
            *"$c"*) ;;
            *) echo "install-deps: adding the $c component" >&2; "$rustup" component add "$c" >/dev/null ;;
        esac
    done
fi
