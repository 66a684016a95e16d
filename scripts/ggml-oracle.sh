#!/usr/bin/env bash
# Builds ggml's libggml-base (the C reference for GGUF's block types and loader) into .ggml-oracle/,
# from the source tarball described in ../shared/oracles/README.md. The tests call it through
# fixtures/reference_ggml.py when ST_CONVERT_GGML_LIB (or .ggml-oracle/) points at it.
#
#   scripts/ggml-oracle.sh [TARBALL]     default: $GGML_SRC_TARBALL, else ../shared/oracles/ggml-src.tar.gz
#                                        beside the clone, else /work/shared/oracles/ggml-src.tar.gz
#
# Prints the library's path. Exit 3 when the tarball is absent (nothing else is touched), 1 when the
# build fails. Built with GGML_NATIVE=OFF: plain IEEE single-precision arithmetic in source order, no
# FMA, which is what the bit-exact comparisons assume.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tarball="${1:-${GGML_SRC_TARBALL:-$root/../shared/oracles/ggml-src.tar.gz}}"
# a clone that is not beside ../shared (a CI checkout elsewhere) finds the machine's copy
[ -f "$tarball" ] || [ -n "${1:-}${GGML_SRC_TARBALL:-}" ] || tarball=/work/shared/oracles/ggml-src.tar.gz
out="$root/.ggml-oracle"
lib="$out/build/src/libggml-base.so"

if [ ! -f "$tarball" ]; then
  echo "ggml-oracle: no ggml source tarball at $tarball (see ../shared/oracles/README.md, or pass its path)" >&2
  exit 3
fi
if [ -f "$lib" ] && [ "$out/.source" -nt "$tarball" ] && [ "$(cat "$out/.source")" = "$tarball" ]; then
  echo "$lib"
  exit 0
fi
command -v cmake >/dev/null || { echo "ggml-oracle: cmake is needed (apt-get install -y cmake)" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/src"
tar -xzf "$tarball" -C "$out/src"
cmake -S "$out/src" -B "$out/build" -DGGML_NATIVE=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
  -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_TYPE=Release >"$out/cmake.log" 2>&1 \
  || { echo "ggml-oracle: cmake configure failed, see $out/cmake.log" >&2; exit 1; }
cmake --build "$out/build" -j2 --target ggml-base >>"$out/cmake.log" 2>&1 \
  || { echo "ggml-oracle: build failed, see $out/cmake.log" >&2; exit 1; }
# moved into build/src by the ggml CMake of this snapshot
[ -f "$lib" ] || lib="$(find "$out/build" -name 'libggml-base.so' | head -1)"
[ -f "$lib" ] || { echo "ggml-oracle: the build made no libggml-base.so" >&2; exit 1; }
printf '%s' "$tarball" >"$out/.source"
echo "$lib"
