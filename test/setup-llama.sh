#!/bin/sh
# Installs the llama.cpp oracle used by the tests: the prebuilt CPU libraries of llama.cpp
# release v0.4.0 from the npm package @node-llama-cpp/linux-x64@3.21.1 (about 85 MB, pinned by
# test/llama/package-lock.json) and the matching source tree (headers) cloned from the git
# bundle shipped in node-llama-cpp@3.21.1. Idempotent; run from anywhere. Needs node >= 20, npm
# and git. Then `make build/ref`.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dir="$here/llama"
bins="$dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
bundle="$dir/node_modules/node-llama-cpp/llama/gitRelease.bundle"
libs="libllama.v0.4.0.so libggml.v0.4.0.so libggml-base.so"

fail() { echo "setup-llama: $*" >&2; exit 1; }

installed() {
    for l in $libs; do [ -f "$bins/$l" ] || return 1; done
    [ -f "$dir/src/include/llama.h" ] && [ -f "$dir/src/ggml/include/ggml.h" ] &&
    [ -f "$dir/node_modules/.package-lock.json" ] &&
    cmp -s "$dir/package-lock.json" "$dir/node_modules/.clover-installed-lock" 2>/dev/null
}

if installed; then
    echo "setup-llama: llama.cpp v0.4.0 already installed in $dir"
    exit 0
fi

command -v npm >/dev/null 2>&1 || fail "npm not found (needs node >= 20)"
command -v git >/dev/null 2>&1 || fail "git not found"
[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] || fail "only linux x86_64 is supported (prebuilt linux-x64 libraries)"

rm -f "$dir/node_modules/.clover-installed-lock"
# --ignore-scripts: node-llama-cpp's postinstall would try to fetch/build binaries; we only need
# the files in the packages.
(cd "$dir" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null) ||
    fail "npm ci failed in $dir"

for l in $libs; do
    [ -f "$bins/$l" ] || fail "missing $bins/$l (library names changed? found: $(ls "$bins" 2>/dev/null | tr '\n' ' '))"
done
rel=$(sed -n 's/.*"release":"\([^"]*\)".*/\1/p' "$bins/_nlcBuildMetadata.json" 2>/dev/null || true)
[ "$rel" = "v0.4.0" ] || fail "prebuilt libraries are llama.cpp '$rel', expected v0.4.0"
[ -f "$bundle" ] || fail "missing $bundle"

rm -rf "$dir/src"
git -c advice.detachedHead=false clone -q "$bundle" "$dir/src" || fail "git clone of $bundle failed"
[ -f "$dir/src/include/llama.h" ] && [ -f "$dir/src/ggml/include/ggml.h" ] || fail "llama.h/ggml.h missing in $dir/src"

cp "$dir/package-lock.json" "$dir/node_modules/.clover-installed-lock"
echo "setup-llama: installed llama.cpp v0.4.0 (node-llama-cpp 3.21.1) in $dir"
