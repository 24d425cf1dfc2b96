# Run at every build (cli/CMakeLists.txt): writes OUT with the checkout's commit, rewriting it only
# when the commit changed, so `nanprov --version` names the commit it was built from without
# rebuilding the CLI each time.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown (not built from a git checkout)")
else()
  # "-dirty": tracked files differ from that commit, so the commit alone does not say what ran.
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT changes STREQUAL "")
    string(APPEND commit "-dirty")
  endif()
endif()
set(text "// Generated at build time by cmake/write_commit.cmake.\n#pragma once\nnamespace nanprov::build {\ninline constexpr const char* kCommit = \"${commit}\";\n}  // namespace nanprov::build\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
