#!/usr/bin/env bash
# A Status or StatusOr dropped without a look does not compile quietly (base/status.h: [[nodiscard]]):
# a snippet that drops one fails under -Werror=unused-result, and the snippet that discards it
# visibly (.ignore(), a cast to void) compiles.
#   tests/layering/dropped_status_does_not_compile.sh SOURCE_DIR CXX
set -uo pipefail
root="$1" cxx="$2"
compiles() {
  printf '#include "base/status.h"\nnanprov::Status s();\nnanprov::StatusOr<int> v();\nvoid g() { %s }\n' "$1" |
    "$cxx" -std=c++20 -I"$root" -fsyntax-only -Werror=unused-result -x c++ - 2>/dev/null
}
failed=0
for dropped in 's();' 'v();'; do
  if compiles "$dropped"; then echo "a dropped result compiled: $dropped"; failed=1; fi
done
if ! compiles 's().ignore(); (void)v();'; then echo "a visibly discarded result did not compile"; failed=1; fi
exit "$failed"
