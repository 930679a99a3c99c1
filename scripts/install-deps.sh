#!/usr/bin/env bash
# Install the Debian packages dlshim needs to build, test, benchmark and demo.
#
# Idempotent and quiet: it asks dpkg which packages are missing and touches apt
# only when something is. That keeps `make test` / `make demo` fast on a
# prepared machine and avoids needing network access there at all.
# Safe in non-interactive CI: no prompts, stdin never read.
set -euo pipefail

PACKAGES=(
    build-essential pkg-config
    uthash-dev libcmocka-dev libhdf5-dev libunwind-dev libucx-dev
    python3-torch python3-torchvision python3-h5py python3-numpy python3-pil python3-matplotlib
    hdf5-tools strace valgrind
    dataset-fashion-mnist   # make fidelity
    clang        # fuzzing and sanitizer builds
    util-linux iproute2
)

# "installed" is the only state that counts: "config-files" (removed but not
# purged) or "half-installed" packages must be (re)installed as well.
is_installed() {
    local status
    status=$(dpkg-query -W -f='${db:Status-Status}\n' "$1" 2>/dev/null | head -n1) || return 1
    [[ "$status" == installed ]]
}

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "install-deps: dpkg-query not found; this script supports Debian/Ubuntu only." >&2
    echo "install-deps: please install the equivalents of: ${PACKAGES[*]}" >&2
    exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    is_installed "$pkg" || missing+=("$pkg")
done

# Nothing to do: stay silent so that callers' output stays readable.
((${#missing[@]} == 0)) && exit 0

echo "install-deps: installing missing packages: ${missing[*]}"

# Root is needed for apt; use sudo only non-interactively (-n) so CI never
# blocks waiting for a password.
SUDO=()
if ((EUID != 0)); then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        echo "install-deps: need root (or password-less sudo) to install: ${missing[*]}" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
# --force-confdef/confold: never ask about modified config files.
APT_OPTS=(-y --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install "${APT_OPTS[@]}" "${missing[@]}" </dev/null

# Verify, so a partially failed install is reported here and not as an
# obscure build error later.
still=()
for pkg in "${missing[@]}"; do
    is_installed "$pkg" || still+=("$pkg")
done
if ((${#still[@]} > 0)); then
    echo "install-deps: still missing after apt-get install: ${still[*]}" >&2
    exit 1
fi
echo "install-deps: done"
