# Shared locations for the scripts. Sourced, never run.
# Heavy, reusable things live outside the clone so a fresh clone (CI) reuses them.
NANPROV_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NANPROV_TORCH="${NANPROV_TORCH:-2.13.0}"
NANPROV_TRANSFORMERS="${NANPROV_TRANSFORMERS:-5.17.*}"
NANPROV_SAFETENSORS="${NANPROV_SAFETENSORS:-0.8.*}"
# The HF Trainer needs accelerate; users train in this venv.
NANPROV_ACCELERATE="${NANPROV_ACCELERATE:-1.16.*}"
# Lightning starts its own ranks (ddp, ddp_spawn): the tests check nanprov follows them.
NANPROV_LIGHTNING="${NANPROV_LIGHTNING:-2.6.*}"
# x-transformers writes attention in einsum: the tests check nanprov recognises it as a user has it.
NANPROV_X_TRANSFORMERS="${NANPROV_X_TRANSFORMERS:-2.31.10}"
# ruff checks the bootstrap's Python (pyproject.toml [tool.ruff]; the ctest Lint.BootstrapIsRuffClean).
NANPROV_RUFF="${NANPROV_RUFF:-0.17.6}"
# clang-format checks the C++ and CUDA (.clang-format; the ctest Lint.SourcesAreClangFormatClean).
NANPROV_CLANG_FORMAT="${NANPROV_CLANG_FORMAT:-23.1.5}"
NANPROV_CACHE="${NANPROV_CACHE:-$HOME/.cache/nanprov}"
NANPROV_VENV="${NANPROV_VENV:-$NANPROV_CACHE/venv-torch$NANPROV_TORCH}"
NANPROV_BUILD="${NANPROV_BUILD:-$NANPROV_ROOT/build}"
export NANPROV_ROOT NANPROV_TORCH NANPROV_CACHE NANPROV_VENV NANPROV_BUILD
