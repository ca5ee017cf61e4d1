#!/usr/bin/env bash
# Installs the benchmarks' peer: the real hivemind 1.1.12 from PyPI, in a virtual
# environment of Debian's interpreter that sees Debian's torch (idempotent).
# Usage: bench/python/setup_hivemind.sh [VENV=build/hivemind-venv]
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${1:-build/hivemind-venv}
if ! dpkg-query -W -f='${Status}' python3-venv 2>/dev/null | grep -q 'install ok installed'; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends python3-venv
fi
[ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -c 'import hivemind' 2>/dev/null || "$VENV/bin/pip" install -q hivemind==1.1.12
# hivemind's BLOCKWISE_8BIT codec needs bitsandbytes; 0.41.3's CPU library has the
# blockwise quantizer (without deps: it must not replace Debian's torch).
"$VENV/bin/python" -c 'import bitsandbytes' >/dev/null 2>&1 || "$VENV/bin/pip" install -q --no-deps bitsandbytes==0.41.3
"$VENV/bin/python" -c 'import hivemind; print("hivemind", hivemind.__version__, "in", "'"$VENV"'")'
