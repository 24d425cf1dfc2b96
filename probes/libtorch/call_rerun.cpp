#include "probes/libtorch/call_rerun.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "base/status.h"
#include "base/text.h"
#include "probes/libtorch/padded_lse.h"
#include "probes/libtorch/probe_thread.h"

namespace nanprov::probes {
namespace {

// Results kept to tell the next rerun's bits from; past this many every new one counts as
// distinct without being kept.
constexpr size_t kKeptResults = 4;

std::mutex g_ops_mu;
std::map<std::string, RerunnableOp>& rerunnableOps() {
  static auto* ops = new std::map<std::string, RerunnableOp>();  // leaked: read at exit too
  return *ops;
}

std::optional<RerunnableOp> rerunnableOp(const std::string& op) {
  std::lock_guard<std::mutex> lock(g_ops_mu);
  auto it = rerunnableOps().find(op);
  if (it == rerunnableOps().end()) return std::nullopt;
  return it->second;
}

// The last tensor held in `role`: an out buffer is an input and the output, and the output
// comes last.
at::Tensor lastOf(const RoleTensors& tensors, Role role) {
  at::Tensor found;
  for (const auto& [r, t] : tensors) {
    if (r == role && t.defined()) found = t;
  }
  return found;
}

RoleTensors onHost(const RoleTensors& tensors) {
  RoleTensors out;
  for (const auto& [role, t] : tensors) out.emplace_back(role, t.detach().to(at::kCPU).contiguous());
  return out;
}

// Same bits in every role both hold with the same shape (a role whose shape differs, an LSE
// the run narrowed and a rerun did not, is not compared); at least one compared.
bool sameBits(const RoleTensors& a, const RoleTensors& b) {
  int compared = 0;
  for (const auto& [role, x] : a) {
    at::Tensor y = lastOf(b, role);
    if (!y.defined() || x.sizes() != y.sizes()) continue;
    if (x.scalar_type() != y.scalar_type() || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) return false;
    ++compared;
  }
  return compared > 0;
}

std::set<std::string> nonfiniteRoles(const RoleTensors& results) {
  std::set<std::string> roles;
  for (const auto& [role, t] : results) {
    if (t.is_floating_point() && !at::isfinite(t).all().item<bool>()) roles.insert(roleName(role));
  }
  return roles;
}

std::string whyNot(const CallEvent& rec, const CallArgs& args, const std::optional<RerunnableOp>& op, bool user_ops) {
  if (rec.phase != Phase::kForward) return "a backward is rerun by nanprov replay from its capture, not in the run";
  if (!op) return std::string("its call is not one op nanprov can run again (") + rec.op + ")";
  if (op->user_op && !user_ops) {
    return "a --probe-op is the library's own code, which may keep state: nanprov run --reruns N reruns it";
  }
  if (c10::impl::TorchDispatchModeTLS::any_modes_set()) return "a dispatch mode was active when it was captured";
  for (const auto& [name, value] : args) {
    if (name == "dropout_p" && value.isDouble() && value.toDouble() > 0) {
      return "it used dropout, whose random mask a rerun would draw anew";
    }
  }
  return "";
}

// The op's arguments as the run passed them: role tensors and the other arguments as held, and a
// fresh copy of each argument the op writes (an out buffer), so the run's tensors stay as they are.
StatusOr<torch::jit::Stack> argumentsOf(const RerunnableOp& op, const RoleTensors& tensors, const CallArgs& args) {
  torch::jit::Stack stack(op.num_arguments);
  for (const auto& [index, role] : op.inputs) {
    at::Tensor t;
    for (const auto& [r, held] : tensors) {
      if (r == role && held.defined()) {
        t = held;  // the first: the input
        break;
      }
    }
    if (t.defined()) {
      stack[index] = t;
    } else if (role == Role::kQ || role == Role::kK || role == Role::kV) {
      return Status::Error(std::string("its ") + roleName(role) + " was not held");
    }  // else an optional role the call did not pass (no mask): None, as the op got it
  }
  if (args.size() != op.others.size()) return Status::Error("its arguments were not all held");
  for (size_t i = 0; i < args.size(); ++i) stack[op.others[i]] = args[i].second;
  const auto& schema = op.handle.schema().arguments();
  for (size_t i = 0; i < stack.size() && i < schema.size(); ++i) {
    const c10::AliasInfo* alias = schema[i].alias_info();
    if (alias && alias->isWrite() && stack[i].isTensor()) stack[i] = stack[i].toTensor().detach().clone();
  }
  return stack;
}

// One rerun's outputs by role, narrowed as the probes narrow the run's (padded_lse.h).
RoleTensors rerunOnce(const RerunnableOp& op, const RoleTensors& tensors, const CallArgs& args) {
  auto stack = argumentsOf(op, tensors, args);
  if (!stack.ok()) throw std::runtime_error(stack.status().message());
  at::Tensor out_buffer = op.out_argument ? (*stack)[*op.out_argument].toTensor() : at::Tensor();
  op.handle.callBoxed(&*stack);
  RoleTensors results;
  if (out_buffer.defined()) results.emplace_back(Role::kO, out_buffer);
  for (size_t i = 0; i < op.desc->outputs.size() && i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined()) results.emplace_back(op.desc->outputs[i], v.toTensor());
  }
  unpadLse(*op.desc, tensors, results);
  return onHost(results);
}

// The device's random generator put back as it was: the reruns draw nothing the training will.
class GeneratorKept {
 public:
  explicit GeneratorKept(const at::Device& device) {
    try {
      generator_ = at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> lock(generator_->mutex());
      state_ = generator_->get_state();
    } catch (const std::exception&) {
      generator_.reset();
    }
  }
  ~GeneratorKept() {
    if (!generator_) return;
    try {
      std::lock_guard<std::mutex> lock(generator_->mutex());
      generator_->set_state(state_);
    } catch (const std::exception&) {  // a destructor: never throws into the training
    }
  }
  GeneratorKept(const GeneratorKept&) = delete;
  GeneratorKept& operator=(const GeneratorKept&) = delete;

 private:
  std::optional<at::Generator> generator_;
  at::Tensor state_;
};

}  // namespace

void registerRerunnableOp(RerunnableOp recipe) {
  std::lock_guard<std::mutex> lock(g_ops_mu);
  rerunnableOps().insert_or_assign(recipe.desc->name, std::move(recipe));
}

CallReruns rerunCall(const CallEvent& rec, const RoleTensors& tensors, const CallArgs& args, int runs,
                     const std::vector<std::string>& nonfinite_outputs, bool user_ops) {
  CallReruns out;
  const std::optional<RerunnableOp> op = rerunnableOp(rec.op);
  if (std::string why = whyNot(rec, args, op, user_ops); !why.empty()) {
    out.not_rerun = why;
    return out;
  }
  try {
    RoleTensors run;
    for (Role role : {Role::kO, Role::kLSE}) {
      if (at::Tensor t = lastOf(tensors, role); t.defined()) run.emplace_back(role, t);
    }
    run = onHost(run);
    const std::set<std::string> failed(nonfinite_outputs.begin(), nonfinite_outputs.end());
    const at::Tensor q = lastOf(tensors, Role::kQ);
    std::optional<GeneratorKept> generator;  // only a library's own op may draw: put back what it drew
    if (op->user_op) generator.emplace(q.defined() ? q.device() : at::Device(at::kCPU));
    at::NoGradGuard no_grad;
    ProbesPassThrough unprobed;  // the rerun is nanprov's own call, not the training's
    std::vector<RoleTensors> kept;
    for (int i = 0; i < runs; ++i) {
      RoleTensors results = rerunOnce(*op, tensors, args);
      ++out.runs;
      if (nonfiniteRoles(results) == failed) ++out.reproduced;
      if (sameBits(run, results)) ++out.identical;
      bool seen = false;
      for (const RoleTensors& k : kept) seen = seen || sameBits(k, results);
      if (!seen) {
        ++out.distinct;
        if (kept.size() < kKeptResults) kept.push_back(std::move(results));
      }
    }
  } catch (const std::exception& e) {
    out = CallReruns{};
    out.not_rerun = "running it again failed: " + firstLine(e.what());
  }
  return out;
}

void describeReruns(const CallReruns& reruns, std::map<std::string, std::string>& meta) {
  if (!reruns.not_rerun.empty()) {
    meta["reruns.not_rerun"] = reruns.not_rerun;
    return;
  }
  meta["reruns.runs"] = std::to_string(reruns.runs);
  meta["reruns.reproduced"] = std::to_string(reruns.reproduced);
  meta["reruns.identical"] = std::to_string(reruns.identical);
  meta["reruns.distinct"] = std::to_string(reruns.distinct);
}

}  // namespace nanprov::probes
