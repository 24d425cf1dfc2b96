// Exit codes shared by every nanprov binary (the nanprov command and its replay engine), so a code
// means one thing wherever it is returned. report: 0 clean, 1 a non-finite edge was found, 4
// nothing was checked, 5 the audit found finite but wrong outputs (and no edge). replay: 0 no fault
// recurred, 1 one did (audit: a finding), 3 the capture could not be read or judged. Every reader
// given several run directories: 6 they are not one job's.
#pragma once

namespace nanprov {

enum ExitCode : int {
  kClean = 0,
  kEdgeFound = 1,
  kUsageError = 2,
  kInputError = 3,
  kNothingChecked = 4,
  kAuditFound = 5,
  kNotOneJob = 6,
};

}  // namespace nanprov
