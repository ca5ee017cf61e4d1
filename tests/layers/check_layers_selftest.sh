#!/usr/bin/env bash
# The layering check catches what it must: a tree with one violation of each kind fails,
# naming each, and the same tree without them passes. Usage: check_layers_selftest.sh CHECKER
set -euo pipefail
CHECK=$1
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
mkdir -p "$t"/core/dht "$t"/messages "$t"/transport "$t"/sim "$t"/actors
printf '#include "messages/buffer.hpp"\n#include <vector>\n' > "$t"/core/dht/ok.hpp
printf '#include "core/effects.hpp"\n#include "transport/transport.hpp"\n#include <caf/all.hpp>\n' > "$t"/actors/ok.cpp
"$CHECK" "$t" >/dev/null || { echo "a clean tree was refused"; "$CHECK" "$t"; exit 1; }
printf '#include "actors/gateway.hpp"\n' > "$t"/core/dht/bad1.hpp
printf '  #  include <caf/all.hpp>  // a comment\n' > "$t"/core/dht/bad2.cpp
printf '#include "core/effects.hpp"\n' > "$t"/messages/bad3.hpp
printf '#include "actors/rpc.hpp"\n' > "$t"/transport/bad4.cpp
printf '#include <ucp/api/ucp.h>\n' > "$t"/sim/bad5.cpp
set +e; out=$("$CHECK" "$t"); rc=$?; set -e
echo "$out"
[ "$rc" -eq 1 ] || { echo "expected exit 1, got $rc"; exit 1; }
for f in core/dht/bad1.hpp core/dht/bad2.cpp messages/bad3.hpp transport/bad4.cpp sim/bad5.cpp; do
  grep -q "^$f:1:" <<<"$out" || { echo "missed the violation in $f"; exit 1; }
done
if grep -q "ok\.\(hpp\|cpp\)" <<<"$out"; then echo "flagged an allowed include"; exit 1; fi
echo "the layering check refuses each kind of violation and passes the clean tree"
