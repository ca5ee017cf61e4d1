#!/usr/bin/env bash
# Installs the build into a staging folder (DESTDIR) and uses it from outside the tree:
# an out-of-tree C++ trainer built with find_package(apiary), the same trainer built with
# pkg-config, and a Python script against the staged module.
# Usage: tests/install/install_test.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
PREFIX=/usr/local
DESTDIR="$STAGE" cmake --install "$BUILD" --prefix "$PREFIX" >"$STAGE/install.log"
ROOT="$STAGE$PREFIX"
test -x "$ROOT/bin/apiary"
test -f "$ROOT/lib/cmake/apiary/apiaryConfig.cmake"
test -f "$ROOT/lib/pkgconfig/apiary.pc"
test -f "$ROOT/include/apiary/api/dht.hpp"
"$ROOT/bin/apiary" --help >/dev/null

# find_package(apiary)
cmake -S "$HERE/trainer" -B "$STAGE/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$ROOT" >"$STAGE/configure.log" || { cat "$STAGE/configure.log"; exit 1; }
cmake --build "$STAGE/cmake-build" >"$STAGE/build.log" || { cat "$STAGE/build.log"; exit 1; }
"$STAGE/cmake-build/trainer"
echo "find_package(apiary): the out-of-tree trainer built and averaged"

# pkg-config (the .pc names the install prefix; the staged tree is one level down)
PC="$STAGE/apiary-staged.pc"
sed "s|^prefix=.*|prefix=$ROOT|" "$ROOT/lib/pkgconfig/apiary.pc" >"$PC"
# shellcheck disable=SC2046
c++ -O1 -o "$STAGE/trainer-pc" "$HERE/trainer/trainer.cpp" $(pkg-config --cflags --libs "$PC")
"$STAGE/trainer-pc"
echo "pkg-config apiary: the trainer built and averaged"

# The Python package
SITE=$(find "$ROOT/lib" -maxdepth 3 -type d -name dist-packages | head -1)
test -n "$SITE" && test -d "$SITE/apiary"
PYTHONPATH="$SITE" /usr/bin/python3 "$HERE/install_test.py" "$SITE"
