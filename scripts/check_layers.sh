#!/usr/bin/env bash
# Checks the layering rules of DESIGN.md ("Layers") on every source file under ROOT
# (default: the repository). Prints each offending include as file:line: include (rule)
# and exits 1 if there is one, 0 if there is none, 2 on bad usage.
# Usage: scripts/check_layers.sh [ROOT]
set -euo pipefail
ROOT=${1:-"$(dirname "$0")/.."}
cd "$ROOT" 2>/dev/null || { echo "check_layers: no such folder: $ROOT" >&2; exit 2; }

find . \( -path ./build -o -path './build-*' -o -path ./.git \) -prune -o -type f \
  \( -name '*.hpp' -o -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 |
  xargs -0 -r grep -HnE '^[[:space:]]*#[[:space:]]*include' |
  awk '
  BEGIN {
    # folder, forbidden include targets (regex), why
    rule("core", "^\"(actors|transport|cuda|sim|api|apps|bench|python)/", "core/ is pure: it depends on messages/ only")
    rule("core", "^<(caf|ucp|ucs|uct|cuda|nccl)", "core/ is pure: no CAF, UCX or CUDA")
    rule("messages", "^\"(core|actors|transport|cuda|sim|api|apps|bench|python)/", "messages/ is the bottom layer")
    rule("transport", "^\"(actors|core|sim|api|apps|bench|python)/", "transport/ sits under actors/, beside core/")
    rule("sim", "^\"(actors|transport|cuda|api|apps|bench|python)/", "sim/ runs cores in virtual time, without shells")
    rule("cuda", "^\"(actors|core|transport|sim|api|apps|bench|python)/", "cuda/ is kernels behind a plain C++ API")
    rule("actors", "^\"(api|apps|bench|python)/", "actors/ sits under api/")
    rule("api", "^\"(apps|bench|python)/", "api/ sits under apps/, bench/ and python/")
    files = 0; bad = 0
  }
  function rule(folder, pattern, why) { n++; rf[n] = folder; rp[n] = pattern; rw[n] = why }
  function report(where, why) { print where " (" why ")"; bad++ }
  {
    file = $0; sub(/^\.\//, "", file); sub(/:.*/, "", file)
    rest = $0; sub(/^[^:]*:/, "", rest); line = rest; sub(/:.*/, "", line); sub(/^[^:]*:/, "", rest)
    target = rest; sub(/^[ \t]*#[ \t]*include[ \t]*/, "", target); sub(/[ \t]*(\/\/.*)?$/, "", target)
    if (!(file in seen)) { seen[file] = 1; files++ }
    folder = file; sub(/\/.*/, "", folder)
    where = file ":" line ": #include " target
    for (i = 1; i <= n; i++) if (folder == rf[i] && target ~ rp[i]) report(where, rw[i])
    if (target ~ /^<caf\// && folder !~ /^(actors|api|apps|bench|tests)$/) report(where, "CAF stays in actors/, api/, apps/, bench/, tests/")
    if (target ~ /^<(ucp|ucs|uct)\// && folder !~ /^(transport|bench|tests)$/) report(where, "UCX stays in transport/, bench/, tests/")
  }
  END {
    if (bad > 0) { print "check_layers: " bad " include(s) break the layering rules (DESIGN.md, \"Layers\")"; exit 1 }
    print "check_layers: " files " files with includes, every include follows the layering rules"
  }'
