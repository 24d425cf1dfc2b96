// What the bootstrap noted about each Python process of a run (processes/<pid>.json, written by
// probes/bootstrap): whether the probes loaded, and why not. Launchers (torchrun's agent and the
// like: they train nothing and are not instrumented) are not counted.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "store/run_dir.h"

namespace nanprov::store {

struct ProcessNotes {
  int processes = 0;
  int instrumented = 0;
  std::vector<std::string> problems;  // "pid 123: torch 2.9 in this process, but ..."
  // The ranks of the instrumented processes, from the RANK they saw (none: rank 0, a plain
  // `python train.py`): the ranks that ran, even where none left a store (nothing was checked).
  std::set<int> ranks;
};
// Notes that do not read as JSON objects are passed over: a process may have died writing one.
ProcessNotes readProcessNotes(const RunDirs& dirs);

}  // namespace nanprov::store
