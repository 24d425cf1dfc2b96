// What this thread is inside, as the probes see it: a probed op (attention_hook.cpp's wrappers)
// or an op nanprov runs itself, SDPA's composite, a DataLoader worker's attention, and the
// brackets the bootstrap opens around attention that is no ATen op (foreign_calls.h). Every
// probe asks here before it looks at a call, so attention found inside another call is that
// call's; nothing here finds the process's probes (probes.h). Thread-local, so none of it locks.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "probes/core/call_identity.h"

namespace nanprov::probes {

class Session;

// Whether a tensor holds real data the probes may read (not a FakeTensor, functional wrapper or
// meta tensor of torch.compile's tracing).
bool realTensor(const at::Tensor& t);

// True while this thread is inside a probed op: attention inside it is part of that call.
bool insideProbedOp();
// Held while a probed op runs below its wrapper.
class InsideProbedOp {
 public:
  InsideProbedOp();
  ~InsideProbedOp();
  InsideProbedOp(const InsideProbedOp&) = delete;
  InsideProbedOp& operator=(const InsideProbedOp&) = delete;
};

// Held while nanprov runs an op itself (call_rerun.h): the probes let every call on this thread
// through, as they do inside a probed op.
class ProbesPassThrough {
 public:
  ProbesPassThrough();
  ~ProbesPassThrough();
  ProbesPassThrough(const ProbesPassThrough&) = delete;
  ProbesPassThrough& operator=(const ProbesPassThrough&) = delete;
};

// True while this thread runs a probed op or SDPA's composite: a softmax there is SDPA's own.
bool insideAttentionCall();
// Held while SDPA's composite kernel runs (its MATH path runs a softmax).
class InsideSdpa {
 public:
  InsideSdpa();
  ~InsideSdpa();
  InsideSdpa(const InsideSdpa&) = delete;
  InsideSdpa& operator=(const InsideSdpa&) = delete;
};

// Held around an attention call that is not probed: in a DataLoader worker (Session::becomeWorker)
// the outermost one on the thread is counted for the rank, once, whatever runs inside it (SDPA's
// fused op, the fast path's SDPA). Elsewhere it does nothing.
class WorkerCall {
 public:
  explicit WorkerCall(Session& session);
  ~WorkerCall();
  WorkerCall(const WorkerCall&) = delete;
  WorkerCall& operator=(const WorkerCall&) = delete;

 private:
  bool held_ = false;
};

// A bracket's kernel trace (foreign_calls.cpp's CallTrace), opaque here.
class BracketTrace {
 public:
  virtual ~BracketTrace() = default;
  virtual const char* unattributed() const = 0;
};

// One bracket opened by begin_call on this thread (foreign_calls.h). Unnamed when the call is not
// probed (the session is off, or it runs inside a probed op): brackets stay balanced either way.
struct OpenBracket {
  std::optional<CallName> name;
  bool boundary = false;        // a module's boundary (--probe-module), not the attention call itself
  bool checked_inside = false;  // a call nanprov checked ran inside it
  bool claimed = false;         // the first forward call inside took its name
  // A boundary's: the scores the largest softmax inside it consumed (noteSoftmaxInside), recorded
  // as the module call's S, so its logit trend reads the logits the module computed.
  at::Tensor scores;
  int64_t start_ns = 0;
  std::unique_ptr<BracketTrace> trace;  // CUDA only; destroyed first, so nanprov's own check kernels are not the call's
};

// This thread's open brackets, the innermost last: foreign_calls.cpp opens and closes them.
std::vector<OpenBracket>& openBrackets();

// A forward call recorded through a bracket on this thread; and how many so far: the bootstrap
// counts, around a compiled graph, which of its FlexAttention calls were recorded and which went
// unseen.
void countForeignCall();
int64_t foreignCallsRecorded();

// True while a bracket that records an attention call with its real Q, K, V is open on this thread
// (the MHA, Hugging Face eager, FlashAttention and FlexAttention probes): attention computed
// inside is that call's. A module's boundary (--probe-module) is not such a bracket: attention
// found inside it is recorded as a call of its own.
bool insideRecordedCall();

// A checked call was recorded on this thread: every bracket open around it learns so.
void noteCheckedCall();

// The name of the module boundary this thread's innermost bracket is, for the first forward call
// inside it: that call is the module's attention (its real Q, K, V), so it is named as the module's
// call once, not twice (and its kernels, traced from the boundary on, are its own). nullopt when
// the innermost bracket is not an unclaimed, named boundary.
std::optional<CallName> claimBoundaryName();

// A softmax ran on this thread over `scores`. When the innermost bracket is a module's boundary
// (--probe-module) whose attention nanprov did not find inside, the scores of its largest softmax
// are kept and recorded as the module call's S: its logit trend then reads the logits the module
// computed, not a bound from its arguments (which may be its hidden states, not its Q and K).
// Held until the module's call is recorded or abandoned.
void noteSoftmaxInside(const at::Tensor& scores);

// At a step boundary, on the flushing thread: a bracket still open belongs to a call that raised
// past the bootstrap (no bracket spans an optimizer step), so it is closed and later kernels are
// not its; then each part that keeps a half-seen call on the thread forgets it (forgetAtStepBoundary).
void endStepOnThread(Session& session);
// Registers what endStepOnThread calls, at static initialisation (softmax_attention.cpp).
void forgetAtStepBoundary(void (*forget)(Session& session));

}  // namespace nanprov::probes
