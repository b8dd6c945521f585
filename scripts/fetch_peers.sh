#!/usr/bin/env bash
# Download the lmcache wheel (no dependencies) into <venv>/peers/ for `tiered-kv bench peers` and
# tests/test_parity.py. Only its pure-Python cache simulator (lmcache/tools/cache_simulator/) is
# used: tiered_kv.sim.peers extracts it at run time, so lmcache itself (torch, CUDA) is never
# installed. Idempotent: does nothing when a wheel is already there.
#   usage: scripts/fetch_peers.sh [VENV]        (default: .venv next to this script's repo)
#   env:   LMCACHE_SPEC (default "lmcache"), e.g. LMCACHE_SPEC="lmcache==0.5.6"
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$here/.venv}"
dest="$venv/peers"
pip="$venv/bin/pip"
[ -x "$pip" ] || pip="$venv/bin/python -m pip"
mkdir -p "$dest"
if compgen -G "$dest/lmcache-*.whl" > /dev/null; then
    echo "fetch_peers: $(basename "$(ls "$dest"/lmcache-*.whl | tail -n 1)") already in $dest"
    exit 0
fi
# A wheel only (no sdist build), for this interpreter; the simulator inside is pure Python.
$pip download --no-deps --only-binary=:all: --dest "$dest" "${LMCACHE_SPEC:-lmcache}"
echo "fetch_peers: $(ls "$dest"/lmcache-*.whl | tail -n 1)"
