// Where nanprov's parts are, found from the path of the running nanprov command, never compiled
// in: a build tree, a `cmake --install` prefix and a `pip install` into an environment share one
// layout (cmake/NanprovLayout.cmake), and any of them can be moved as a whole.
//   <prefix>/bin/nanprov
//   <prefix>/lib/nanprov/nanprov-replay, libnanprov_probes.so
//   <prefix>/share/nanprov/bootstrap/, build.json
#pragma once

#include <string>

namespace nanprov::cli {

struct InstallLayout {
  std::string prefix;          // the directory above bin/
  std::string probes_library;  // NANPROV_PROBES_LIB overrides it
  std::string replay_engine;
  std::string bootstrap_dir;
  std::string installed_by;  // "build tree", "cmake --install" or "pip" (build.json; "" if it is missing)
  std::string source_dir;    // the sources it was built from, and their build tree (build.json)
  std::string build_dir;
  // The Python that reruns a FlashAttention call and that `replay` defaults to: the environment's
  // own when pip installed nanprov into it (it moves with the environment), else the one it was
  // built with.
  std::string python;

  // How to rebuild against the torch of `python`, for one line of advice.
  std::string rebuildCommand(const std::string& python) const;
};

// The layout of this process's nanprov command (computed once).
const InstallLayout& installLayout();

// The layout of a nanprov command at `executable` (tests, and installLayout()).
InstallLayout layoutOf(const std::string& executable);

}  // namespace nanprov::cli
