#!/usr/bin/env bash
# nanprov installed as users install it (issue 49), from scratch, in a folder of its own:
#   1. a fresh venv with torch; `pip install --no-build-isolation SOURCES` leaves the sources as they were;
#   2. from another folder, with only that venv's bin on PATH: --version, doctor, and the demo
#      training under `nanprov run` (the edge found) and `nanprov replay` (the edge replayed);
#   3. the venv moved elsewhere: the demo again, through the moved command;
#   4. `pip uninstall nanprov` leaves no nanprov file in the venv;
#   5. the sdist: built from the sources, installed into a second fresh venv, `nanprov doctor`.
# Usage: install_test.sh SOURCES TORCH_VERSION [WORK_DIR]
set -euo pipefail
src="$(cd "$1" && pwd)"
torch_version="$2"
work="${3:-${TMPDIR:-/tmp}/nanprov-install-test}"
python="$(command -v python3.11 || command -v python3)"

fail() { echo "install test: $*" >&2; exit 1; }
step() { echo "== $*"; }

rm -rf "$work"
mkdir -p "$work/elsewhere"
# The compiler cache the clone's build uses (scripts/env.sh): a later run of this test at the same
# paths compiles almost nothing. A cold one compiles nanprov twice (about 27 CPU-minutes).
if command -v ccache >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-${NANPROV_CACHE:-$HOME/.cache/nanprov}/ccache}"
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=/ CCACHE_NOHASHDIR=1
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${NANPROV_JOBS:-2}"

fresh_venv() {
  "$python" -m venv "$1"
  "$1/bin/pip" install -q "torch==$torch_version" numpy scikit-build-core build 2>&1 | grep -v "^WARNING: Location" || true
  "$1/bin/python" -c "import torch, scikit_build_core" || fail "could not make a venv with torch $torch_version at $1"
}

step "a fresh venv, and pip install --no-build-isolation $src"
fresh_venv "$work/venv"
before="$(git -C "$src" status --porcelain --ignored 2>/dev/null || true)"
"$work/venv/bin/pip" install -q --no-build-isolation "$src" >"$work/pip-install.log" 2>&1 ||
  { cat "$work/pip-install.log"; fail "pip install failed"; }
after="$(git -C "$src" status --porcelain --ignored 2>/dev/null || true)"
[ "$before" = "$after" ] || fail "pip install left files in the sources: $(diff <(echo "$before") <(echo "$after"))"

demo() {  # $1: the venv; the demo's training under nanprov run, then its capture replayed
  local venv="$1" out="$work/elsewhere/run-$(basename "$1")"
  cp "$src/examples/tiny_transformer.py" "$work/elsewhere/"
  (
    cd "$work/elsewhere"
    export PATH="$venv/bin:/usr/bin:/bin"
    unset PYTHONPATH NANPROV_PROBES_LIB
    set +e
    nanprov run --out "$out" -- python tiny_transformer.py --steps 4 --glitch-step 2 >"$out.log" 2>&1
    local run=$?
    nanprov replay "$out" >"$out.replay.log" 2>&1
    local replay=$?
    set -e
    [ "$run" -eq 1 ] && grep -q "first non-finite edge" "$out.log" ||
      { cat "$out.log"; fail "nanprov run from $venv exited $run without the demo's edge"; }
    [ "$replay" -eq 1 ] || { cat "$out.replay.log"; fail "nanprov replay from $venv exited $replay, not 1 (the edge confirmed)"; }
    echo "$(grep -m1 "first non-finite edge" "$out.log")"
  )
}

step "from another folder, with only the venv's bin on PATH"
(
  cd "$work/elsewhere"
  export PATH="$work/venv/bin:/usr/bin:/bin"
  [ "$(command -v nanprov)" = "$work/venv/bin/nanprov" ] || fail "nanprov is not on the venv's PATH"
  nanprov --version
  nanprov doctor || fail "nanprov doctor failed in the venv it was installed into"
  nanprov doctor --json | python -c "import json,sys; d=json.load(sys.stdin); assert d['install']['installed_by'] == 'pip', d['install']"
)
demo "$work/venv"

step "the venv moved to another path"
mv "$work/venv" "$work/moved"
demo "$work/moved"
PATH="$work/moved/bin:/usr/bin:/bin" nanprov doctor >/dev/null || fail "nanprov doctor failed after the venv moved"

step "pip uninstall nanprov"
"$work/moved/bin/python" -m pip uninstall -q -y nanprov
left="$(find "$work/moved" -name '*nanprov*' -not -path '*/__pycache__/*' | head -5)"
[ -z "$left" ] || fail "pip uninstall left nanprov files: $left"

step "the sdist, installed into a second fresh venv"
"$work/moved/bin/python" -m build --sdist --no-isolation --outdir "$work/dist" "$src" >"$work/sdist.log" 2>&1 ||
  { cat "$work/sdist.log"; fail "the sdist did not build"; }
sdist="$(ls "$work"/dist/nanprov-*.tar.gz)"
fresh_venv "$work/venv2"
"$work/venv2/bin/pip" install -q --no-build-isolation "$sdist" >"$work/pip-sdist.log" 2>&1 ||
  { cat "$work/pip-sdist.log"; fail "pip install of the sdist failed"; }
(cd "$work/elsewhere" && PATH="$work/venv2/bin:/usr/bin:/bin" nanprov doctor) || fail "nanprov doctor failed after the sdist install"
echo "install test: passed"
rm -rf "$work"
