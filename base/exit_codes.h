// Exit codes shared by every nanprov binary (the nanprov command and its replay engine), so a code
// means one thing wherever it is returned. report: 0 clean, 1 a non-finite edge was found, 4
// nothing was checked, 5 the audit found finite but wrong outputs (and no edge), 7 replicas' parameters
// diverged while every value stayed finite (a suspected device). replay: 0 no fault
// recurred, 1 one did (audit: a finding), 3 the capture could not be read or judged. Every reader
// given several run directories: 6 they are not one job's.
//
// verdict (issue 64): one code per class of fault, for a scheduler or a requeue script to act on
// without parsing text (report/run_verdict.h says how each is decided; the README's table what a
// job does on each): 0 no fault, 4 nothing checked, 10..14 below. Codes from 10 on, so that they
// never read as report's or replay's 1 or as a usage error.
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
  kReplicaDiverged = 7,  // report: ranks that replicate their parameters (DDP) held different ones, all finite
  // verdict
  kKernelFault = 10,             // a kernel fails the call every time it runs it: fix the code (or avoid the backend)
  kNondeterministicKernel = 11,  // the fault recurs in some reruns only: requeue (and fix the kernel)
  kSuspectDevice = 12,           // the run's result cannot be recomputed from its inputs: exclude the node, requeue
  kDataOrModelFault = 13,        // data or model (inputs, precision limit, masked rows, outside attention): fix them
  kUndetermined = 14,  // a fault, not classified (unchecked origin, no capture, replay could not judge): a person looks
};

}  // namespace nanprov
