// The CUPTI side of KernelTracer. libcupti is opened at run time with dlopen, not linked:
//  - a torch CUDA build has usually loaded its own libcupti (for Kineto) already, and dlopen by
//    soname returns that same copy, so the process never holds two CUPTIs;
//  - the probes still load on machines whose CUPTI is missing or unusable, and say why.
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "base/interned_text.h"
#include "tracer/kernel_correlation.h"
#include "tracer/kernel_tracer.h"

namespace nanprov {
namespace {

// Kineto uses CUSTOM0 and CUSTOM1 for its own correlation; ours must never collide with them.
constexpr CUpti_ExternalCorrelationKind kOurKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
// CUPTI hands a kernel buffer over only once every record in it is complete, and at a step
// boundary the GPU is still running the step's last kernels: small buffers fill, complete and
// arrive sooner.
constexpr size_t kBufferBytes = 1u << 20;
// At most this many buffers at once (64 MiB). Beyond it CUPTI drops records and counts them,
// rather than nanprov growing without bound.
constexpr int64_t kMaxBuffers = 64;

// The CUPTI entry points nanprov uses, resolved from the loaded libcupti.
struct Cupti {
  decltype(&cuptiActivityRegisterCallbacks) registerCallbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityEnableRuntimeApi) enableRuntimeApi = nullptr;
  decltype(&cuptiActivityEnableDriverApi) enableDriverApi = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop = nullptr;
  decltype(&cuptiActivityFlushAll) flushAll = nullptr;
  decltype(&cuptiActivityGetNextRecord) nextRecord = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) droppedRecords = nullptr;
  decltype(&cuptiGetResultString) resultString = nullptr;
  // Optional: detaching CUPTI after the trace window (below).
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiEnableDomain) enableDomain = nullptr;
  decltype(&cuptiFinalize) finalize = nullptr;

  std::string describe(CUptiResult r) const {
    const char* s = nullptr;
    if (resultString) resultString(r, &s);
    return s ? s : "CUPTI error " + std::to_string(static_cast<int>(r));
  }
};

template <typename F>
bool resolve(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

StatusOr<Cupti> loadCupti() {
  void* lib = nullptr;
  std::string tried;
  for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so", NANPROV_CUPTI_LIBRARY}) {
    if (!*name) continue;
    lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (lib) break;
    tried += std::string(tried.empty() ? "" : ", ") + name;
  }
  if (!lib) return Status::Error("CUPTI library not found (tried " + tried + ")");
  Cupti c;
  bool ok = resolve(lib, "cuptiActivityRegisterCallbacks", &c.registerCallbacks) &&
            resolve(lib, "cuptiActivityEnable", &c.enable) && resolve(lib, "cuptiActivityDisable", &c.disable) &&
            resolve(lib, "cuptiActivityPushExternalCorrelationId", &c.push) &&
            resolve(lib, "cuptiActivityPopExternalCorrelationId", &c.pop) &&
            resolve(lib, "cuptiActivityFlushAll", &c.flushAll) &&
            resolve(lib, "cuptiActivityGetNextRecord", &c.nextRecord) &&
            resolve(lib, "cuptiActivityGetNumDroppedRecords", &c.droppedRecords) &&
            resolve(lib, "cuptiGetResultString", &c.resultString);
  if (!ok) return Status::Error("the CUPTI library found lacks the activity API nanprov needs (too old)");
  // Optional (CUPTI 12.6+): collect only launch API records, far fewer than every API call.
  resolve(lib, "cuptiActivityEnableRuntimeApi", &c.enableRuntimeApi);
  resolve(lib, "cuptiActivityEnableDriverApi", &c.enableDriverApi);
  resolve(lib, "cuptiSubscribe", &c.subscribe);
  resolve(lib, "cuptiEnableDomain", &c.enableDomain);
  resolve(lib, "cuptiFinalize", &c.finalize);
  return c;
}

// State shared with CUPTI's buffer callbacks, which are plain functions.
struct Shared {
  Cupti cupti;
  // Guards correlation. Lock order: CuptiTracer::mu_ before this one, never the reverse. CUPTI
  // calls bufferCompleted (which takes it) from inside flushAll, and pause() flushes under mu_;
  // nothing that holds this lock calls into the tracer.
  std::mutex mu;
  KernelCorrelation correlation;
  std::atomic<int64_t> buffers{0};
  std::atomic<int64_t> dropped{0};
  // What CUPTI delivered, to tell "nothing traced" from "nothing joined" in a bug report.
  int64_t kernel_records = 0, our_external_ids = 0, api_records = 0;
  // Set once CUPTI is detached: no CUPTI call may follow, since any would attach it again.
  std::atomic<bool> detached{false};
};
Shared* g_shared = nullptr;

// Detaching CUPTI (cuptiFinalize) is safe only where no other thread is inside CUPTI, which
// NVIDIA's sample and Kineto get by calling it from a callback at the exit of a CUDA runtime
// call: subscribe, and finalize at the first runtime call that returns. Finalizing also drops
// the subscription.
void CUPTIAPI detachAtApiExit(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite != CUPTI_API_EXIT || g_shared->detached.exchange(true)) return;
  g_shared->cupti.finalize();
}

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  if (g_shared->buffers.load() >= kMaxBuffers) {
    *buffer = nullptr;  // CUPTI drops the records and counts them
    *size = 0;
    return;
  }
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  if (*buffer) ++g_shared->buffers;
}

void CUPTIAPI bufferCompleted(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  Shared& sh = *g_shared;
  {
    std::lock_guard<std::mutex> lock(sh.mu);
    CUpti_Activity* record = nullptr;
    while (sh.cupti.nextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        // The leading fields used here are the same in every kernel record version.
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        LaunchedKernel launched;
        launched.correlation_id = k->correlationId;
        launched.name = k->name ? k->name : "";
        launched.grid[0] = k->gridX, launched.grid[1] = k->gridY, launched.grid[2] = k->gridZ;
        launched.block[0] = k->blockX, launched.block[1] = k->blockY, launched.block[2] = k->blockZ;
        launched.start_ns = static_cast<int64_t>(k->start);
        launched.end_ns = static_cast<int64_t>(k->end);
        launched.device = static_cast<int>(k->deviceId);
        launched.stream = static_cast<int64_t>(k->streamId);
        sh.correlation.onKernel(std::move(launched));
        ++sh.kernel_records;
      } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (e->externalKind == kOurKind) {
          sh.correlation.onExternalId(e->correlationId, e->externalId);
          ++sh.our_external_ids;
        }
      } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME || record->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
        ++sh.api_records;
      }
    }
  }
  size_t dropped = 0;
  if (sh.cupti.droppedRecords(context, stream, &dropped) == CUPTI_SUCCESS) sh.dropped += static_cast<int64_t>(dropped);
  std::free(buffer);
  --sh.buffers;
}

thread_local int t_pushed = 0;  // external ids this thread pushed and has yet to pop

class CuptiTracer final : public KernelTracer {
 public:
  Status start() override {
    std::call_once(started_, [this] {
      Status st = startOnce();
      std::lock_guard<std::mutex> lock(mu_);
      result_ = st;
      attempted_ = true;
      refreshLive();
    });
    return result_;
  }

  bool enter(int64_t seq, const std::string& label) override {
    pushCallRange(label);
    if (!live()) return false;
    if (g_shared->cupti.push(kOurKind, externalIdOfCall(seq)) != CUPTI_SUCCESS) return false;
    ++t_pushed;
    return true;
  }

  bool wantsLabel() const override { return live() || nvtxToolAttached(); }
  bool settled() const override { return settled_.load(std::memory_order_acquire) && !nvtxToolAttached(); }

  void exit() override {
    if (t_pushed > 0) {
      uint64_t id = 0;
      if (!g_shared->detached.load()) g_shared->cupti.pop(kOurKind, &id);
      --t_pushed;
    }
    popCallRange();
  }

  void yield(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (yielded_) return;
    yielded_ = true;
    yield_reason_ = reason;
    refreshLive();
  }

  void reclaim() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!yielded_ || !started_ok_ || paused_) return;
    // The other profiler re-registered CUPTI's buffer callbacks and, when it stopped, disabled
    // the kinds we need: take both back.
    Status st = enableCollection();
    yielded_ = !st.ok();
    if (!st.ok()) yield_reason_ = "CUPTI could not be taken back after another profiler: " + st.message();
    refreshLive();
  }

  void keepAttached() override { keep_attached_.store(true, std::memory_order_release); }

  void pause(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ok_ || paused_) return;
    paused_ = true;
    pause_reason_ = reason;
    refreshLive();
    if (yielded_) return;  // the other profiler owns the kinds now
    const Cupti& c = g_shared->cupti;
    c.flushAll(0);  // may run bufferCompleted here, taking g_shared->mu inside mu_ (the lock order)
    for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                    CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER}) {
      c.disable(kind);
    }
  }

  bool yielded() const override { return yielded_now_.load(std::memory_order_acquire); }

  const char* unattributedReason() const override { return reason_.load(std::memory_order_acquire); }

  std::vector<KernelRecord> collect(bool at_exit) override {
    if (!startedOk()) return {};
    // After a pause CUPTI still holds the traced window's last buffers: flushing hands them over.
    // One step boundary later the window's kernels have long finished, so a forced flush loses
    // nothing, and CUPTI is detached: traced launches cost even with every kind disabled, and a
    // launch-bound job paid 24% for it (Kineto finalizes for the same reason).
    bool detach = false;
    if (!yielded() && !g_shared->detached.load()) {
      detach = pausedFor() >= 2;
      g_shared->cupti.flushAll(at_exit || detach ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
    }
    std::vector<KernelRecord> out;
    {
      std::lock_guard<std::mutex> lock(g_shared->mu);
      out = g_shared->correlation.takeAttributed();
      g_shared->correlation.endRound();
    }
    if (detach) requestDetach();
    return out;
  }

  TracerStats stats() const override {
    TracerStats s;
    if (!g_shared) return s;
    s.started = startedOk();  // mu_ before g_shared->mu, never inside it (the lock order)
    std::lock_guard<std::mutex> lock(g_shared->mu);
    s.attributed_kernels = g_shared->correlation.attributedTotal();
    s.dropped_records = g_shared->dropped.load();
    s.buffers_in_use = g_shared->buffers.load();
    s.kernel_records = g_shared->kernel_records;
    s.external_id_records = g_shared->our_external_ids;
    s.api_records = g_shared->api_records;
    s.detached = g_shared->detached.load();
    return s;
  }

 private:
  bool startedOk() const {
    std::lock_guard<std::mutex> lock(mu_);
    return started_ok_;
  }

  // Step boundaries seen since the pause (0: not paused).
  int pausedFor() {
    std::lock_guard<std::mutex> lock(mu_);
    return paused_ ? ++boundaries_since_pause_ : 0;
  }

  // Asks CUPTI to detach at the next CUDA runtime call's exit. Without the entry points, or when
  // another tool holds the callback API, CUPTI stays attached with every kind disabled.
  void requestDetach() {
    const Cupti& c = g_shared->cupti;
    if (detach_requested_ || keep_attached_.load(std::memory_order_acquire) || !c.subscribe || !c.enableDomain ||
        !c.finalize) {
      return;
    }
    detach_requested_ = true;
    // Not held by an RAII owner on purpose: the subscription's end is cuptiFinalize inside
    // detachAtApiExit, which drops it. Unsubscribing from a destructor, on whatever thread runs
    // it, is the cross-thread CUPTI call that finalizing from the callback exists to avoid.
    CUpti_SubscriberHandle subscriber = nullptr;
    if (c.subscribe(&subscriber, &detachAtApiExit, nullptr) != CUPTI_SUCCESS) return;
    c.enableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
  }

  // Read on every call, so without the lock: the flags' writers publish it under mu_.
  bool live() const { return live_.load(std::memory_order_acquire); }
  // After every change of the flags below, with mu_ held: what calls read without the lock.
  void refreshLive() {
    live_.store(started_ok_ && !yielded_ && !paused_, std::memory_order_release);
    // A yield is not settled: the profiler may give CUPTI back, and calls must ask for it.
    settled_.store(attempted_ && (paused_ || !result_.ok()), std::memory_order_release);
    yielded_now_.store(yielded_, std::memory_order_release);
    const char* reason = "";  // before the first CUDA call (!attempted_) there is nothing to explain
    if (yielded_) reason = internText(yield_reason_);
    else if (paused_) reason = internText(pause_reason_);
    else if (attempted_ && !result_.ok()) reason = internText(result_.message());
    reason_.store(reason, std::memory_order_release);
  }

  Status startOnce() {
    if (const char* off = std::getenv("NANPROV_KERNELS"); off && std::strcmp(off, "off") == 0) {
      return Status::Error("kernel attribution turned off (nanprov run --no-kernels)");
    }
    NANPROV_ASSIGN_OR_RETURN(auto cupti, loadCupti());
    g_shared = new Shared();  // leaked: CUPTI may call back until the process ends
    g_shared->cupti = cupti;
    std::lock_guard<std::mutex> lock(mu_);
    Status st = enableCollection();
    started_ok_ = st.ok();
    refreshLive();
    return st;  // result_ is set by start(), which holds no lock while this runs
  }

  // Registers our buffers and enables the activity kinds. External correlation records only
  // appear when the launch APIs are traced too (cuDNN launches through the driver API), so
  // RUNTIME and DRIVER records are collected, narrowed to the launch calls where CUPTI allows.
  Status enableCollection() {
    const Cupti& c = g_shared->cupti;
    auto check = [&](CUptiResult r, const char* what) -> Status {
      if (r == CUPTI_SUCCESS) return Status::Ok();
      std::string why = c.describe(r);
      if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || r == CUPTI_ERROR_NOT_COMPATIBLE) {
        why += ": another profiler (Nsight Systems, torch.profiler) holds CUPTI";
      } else if (r == CUPTI_ERROR_INVALID_DEVICE || r == CUPTI_ERROR_NOT_INITIALIZED) {
        why += ": no usable GPU";
      } else if (r == CUPTI_ERROR_NOT_SUPPORTED || r == CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED) {
        why += ": the driver is too old for this CUPTI";
      }
      return Status::Error(std::string("CUPTI ") + what + " failed (" + why + ")");
    };
    NANPROV_RETURN_IF_ERROR(check(c.registerCallbacks(&bufferRequested, &bufferCompleted), "buffer registration"));
    NANPROV_RETURN_IF_ERROR(check(c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "kernel tracing"));
    NANPROV_RETURN_IF_ERROR(check(c.enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION), "external correlation"));
    // Launch records alone give the join; every other API record is cost. So all API records
    // are enabled, then everything but the launch calls is switched off again (CUPTI honours
    // per-call settings made after the kind; enabling only the launch calls without the kind
    // produced no records on the H200 with CUDA 13). NANPROV_CUPTI_API=all keeps everything.
    NANPROV_RETURN_IF_ERROR(check(c.enable(CUPTI_ACTIVITY_KIND_RUNTIME), "runtime API tracing"));
    NANPROV_RETURN_IF_ERROR(check(c.enable(CUPTI_ACTIVITY_KIND_DRIVER), "driver API tracing"));
    const char* api = std::getenv("NANPROV_CUPTI_API");
    if ((api && std::strcmp(api, "all") == 0) || !c.enableRuntimeApi || !c.enableDriverApi) return Status::Ok();
    const std::set<CUpti_CallbackId> runtime_launches = {
        CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_v3020,
        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000,
        CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
        CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000};
    const std::set<CUpti_CallbackId> driver_launches = {CUPTI_DRIVER_TRACE_CBID_cuLaunch,
                                                        CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid,
                                                        CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync,
                                                        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                                                        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
                                                        CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
                                                        CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
                                                        CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice,
                                                        CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
                                                        CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
                                                        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
                                                        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz};
    // Ids this CUPTI does not know are refused one by one; that is fine, they are never called.
    for (CUpti_CallbackId id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id) {
      if (!runtime_launches.count(id)) c.enableRuntimeApi(id, 0);
    }
    for (CUpti_CallbackId id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id) {
      if (!driver_launches.count(id)) c.enableDriverApi(id, 0);
    }
    return Status::Ok();
  }

  std::once_flag started_;
  Status result_ = Status::Error("kernel tracer not started");
  // Guards the flags below. Taken first: g_shared->mu may be taken inside it (see Shared::mu).
  mutable std::mutex mu_;
  bool attempted_ = false;
  bool started_ok_ = false;
  bool yielded_ = false;
  std::string yield_reason_;
  bool paused_ = false;
  std::atomic<bool> live_{false};  // started_ok_ && !yielded_ && !paused_
  std::atomic<bool> settled_{false};
  std::atomic<bool> yielded_now_{false};
  std::atomic<const char*> reason_{""};
  std::string pause_reason_;
  int boundaries_since_pause_ = 0;
  bool detach_requested_ = false;  // only collect() touches it, from the step boundary
  std::atomic<bool> keep_attached_{false};
};

}  // namespace

std::unique_ptr<KernelTracer> KernelTracer::create() { return std::make_unique<CuptiTracer>(); }

}  // namespace nanprov
