// The known issues a replay matches: the facts a ReplayResult holds (its conditions, the verdicts
// of the outputs the run produced, the versions and GPU its capture names), put to the matcher.
#pragma once

#include <vector>

#include "replay/known_issues.h"
#include "replay/replay_result.h"

namespace nanprov::replay {

IssueFacts factsOf(const ReplayResult& r);
std::vector<IssueMatch> knownIssuesOf(const ReplayResult& r);
// Entries the capture's facts agree with but cannot decide (a version or fact not recorded).
std::vector<IssueMatch> possibleKnownIssuesOf(const ReplayResult& r);

}  // namespace nanprov::replay
