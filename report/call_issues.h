// The known issues a stored attention call matches (replay/known_issues.h), from what the store
// holds of it: its op, backend and phase, its tensors' dtypes, shapes and health, its mask's fully
// masked rows, and the versions and GPU its rank recorded. What only a replay measures (a row's
// log-sum-exp without a fully masked row, a verdict against the reference) stays unknown, so such
// entries are possible matches that `nanprov replay` decides, never matches.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/records/call_record.h"
#include "replay/known_issues.h"

namespace nanprov {

replay::IssueFacts factsOfCall(const CallRecord& call, const std::map<std::string, std::string>& rank_meta);

struct CallIssues {
  std::vector<replay::IssueMatch> matches;
  std::vector<replay::IssueMatch> possible;  // each with the conditions a replay would decide
};
// Nothing for an injected call: a fault --inject planted is nobody's bug.
CallIssues knownIssuesOfCall(const CallRecord& call, const std::map<std::string, std::string>& rank_meta);


}  // namespace nanprov
