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
#include "report/judgements.h"

namespace nanprov::replay {
struct IssueFacts;  // replay/known_issues.h: the renderers never see it
}  // namespace nanprov::replay

namespace nanprov::report {

replay::IssueFacts factsOfCall(const CallRecord& call, const std::map<std::string, std::string>& rank_meta);

// A known issue the call matches: its entry, and the sentence the text and the page say it in
// ("matches pytorch#196678 (title); fixed in cuDNN 9.26, this run has 9.19.0; ... URL").
struct IssueMatchNote {
  KnownIssueNote issue;
  std::string sentence;
};
// One it may match: every fact the store holds agrees, and a replay would decide the rest.
struct PossibleIssueNote {
  std::string id, url, title;
  std::vector<std::string> undecided;  // the conditions the store does not say ("row_lse_below")
  std::string sentence;                // "may match pytorch#196678 (title); the store does not say row_lse_below"
};

struct CallIssues {
  std::vector<IssueMatchNote> matches;
  std::vector<PossibleIssueNote> possible;
};
// Nothing for an injected call: a fault --inject planted is nobody's bug.
CallIssues knownIssuesOfCall(const CallRecord& call, const std::map<std::string, std::string>& rank_meta);

}  // namespace nanprov::report
