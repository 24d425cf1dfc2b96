// What the store budget folded into summaries, over a run's ranks (nanprov run --store-budget,
// store/budget_keeper.h): the counts stay, the per-call rows of those steps are gone. Read by the
// store's reader, shown by the report.
#pragma once

#include <cstdint>

namespace nanprov {

// Consecutive steps of one rank whose calls the store budget summarised (rows of step_summaries
// that follow one another): what a timeline shows in their place.
struct SummarisedStretch {
  int64_t first_step = 0, last_step = 0;
  int64_t calls = 0;
  int64_t not_clean = 0;  // of `calls`
};

struct Summarised {
  int64_t calls = 0;
  int64_t not_clean = 0;  // of `calls`: a run that stayed non-finite past its first edge steps
  int64_t first_step = -1, last_step = -1;
  int64_t every = 1;  // the most steps one summary row stands for, over ranks
  int ranks = 0;
};

}  // namespace nanprov
