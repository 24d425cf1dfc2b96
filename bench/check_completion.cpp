// How a finished health check should be noticed (issue 26): by a CUDA event recorded after the
// check and queried later (what kernels/health_check_queue does), or by the `written` flags the
// check's last block already stores into host-mapped memory, which need no driver call at all.
// Measures, on the training thread's side, what each costs per check, with the real fused check
// kernel on a small tensor (a launch-bound call), side by side in one run:
//   launch only          launchHealthCheck, back to back (paced by the GPU once its queue fills)
//   launch, idle GPU     one launchHealthCheck timed alone after the stream drained, as in a
//                        launch-bound step, where the GPU waits for the host
//   launch + record      launchHealthCheck, cudaEventRecord         (today's submit)
//   query finished       cudaEventQuery on a completed event         (today's poll, per check)
//   read mapped flags    the `written` flags of a completed check    (the alternative's poll)
//   nanprov-check-completion [checks] [rounds]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/health_check.h"

using nanprov::kernels::CheckScratch;
using nanprov::kernels::HealthCounts;
using nanprov::kernels::TensorView;

namespace {

double nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool ok(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "nanprov-check-completion: %s failed: %s\n", what, cudaGetErrorString(err));
  return false;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int checks = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (checks <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: nanprov-check-completion [checks > 0] [rounds > 0]\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "nanprov-check-completion: no CUDA device; this benchmark runs on a GPU machine\n");
    return 2;
  }
  // One launch-bound call's Q: B=1, H=16, S=256, D=128 in bf16 (1 MiB).
  const int64_t numel = int64_t{1} * 16 * 256 * 128;
  void* data = nullptr;
  CheckScratch* scratch = nullptr;
  HealthCounts* results = nullptr;
  HealthCounts* results_device = nullptr;
  cudaStream_t stream = nullptr;
  if (!ok(cudaMalloc(&data, numel * 2), "cudaMalloc") || !ok(cudaMemset(data, 0, numel * 2), "cudaMemset") ||
      !ok(cudaMalloc(&scratch, sizeof(CheckScratch) * checks), "cudaMalloc") ||
      !ok(cudaMemset(scratch, 0, sizeof(CheckScratch) * checks), "cudaMemset") ||
      !ok(cudaHostAlloc(&results, sizeof(HealthCounts) * checks, cudaHostAllocMapped), "cudaHostAlloc") ||
      !ok(cudaHostGetDevicePointer(reinterpret_cast<void**>(&results_device), results, 0),
          "cudaHostGetDevicePointer") ||
      !ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate")) {
    return 1;
  }
  TensorView view;
  view.data = data;
  view.numel = numel;
  view.ndim = 1;
  view.sizes[0] = numel;
  view.strides[0] = 1;
  view.type = nanprov::kernels::ElementType::kBFloat16;
  view.contiguous = 1;
  const int wave = nanprov::kernels::residentBlocks(0);
  std::vector<cudaEvent_t> events(checks);
  for (auto& e : events) {
    if (!ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate")) return 1;
  }
  std::vector<double> launch, record, query, flags, alone;
  for (int r = 0; r < rounds; ++r) {
    for (int pass = 0; pass < 2; ++pass) {
      const bool with_events = pass == 1;
      for (int i = 0; i < checks; ++i) results[i].written = 0;
      double t0 = nowUs();
      for (int i = 0; i < checks; ++i) {
        if (nanprov::kernels::launchHealthCheck(&view, 1, scratch + i, results_device + i, stream, wave) != 0) return 1;
        if (with_events && !ok(cudaEventRecord(events[i], stream), "cudaEventRecord")) return 1;
      }
      double t1 = nowUs();
      if (!ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) return 1;
      (with_events ? record : launch).push_back((t1 - t0) / checks);
      if (with_events) {
        double q0 = nowUs();
        for (int i = 0; i < checks; ++i) {
          if (!ok(cudaEventQuery(events[i]), "cudaEventQuery")) return 1;
        }
        query.push_back((nowUs() - q0) / checks);
      }
      double f0 = nowUs();
      int written = 0;
      for (int i = 0; i < checks; ++i)
        written += static_cast<int>(*static_cast<volatile uint32_t*>(&results[i].written));
      flags.push_back((nowUs() - f0) / checks);
      if (written != checks) {
        std::fprintf(stderr, "nanprov-check-completion: %d of %d checks did not set their flag\n", checks - written,
                     checks);
        return 1;
      }
    }
  }
  for (int i = 0; i < checks; ++i) {
    if (!ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) return 1;
    double t0 = nowUs();
    if (nanprov::kernels::launchHealthCheck(&view, 1, scratch + i, results_device + i, stream, wave) != 0) return 1;
    alone.push_back(nowUs() - t0);
  }
  if (!ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) return 1;
  std::printf("per check, medians of %d rounds of %d checks (host microseconds):\n", rounds, checks);
  std::printf("  launch only          %7.3f us\n", median(launch));
  std::printf("  launch, idle GPU     %7.3f us  (median of %d launches, each alone)\n", median(alone), checks);
  std::printf("  launch + record      %7.3f us  (the event record adds %.3f us)\n", median(record),
              median(record) - median(launch));
  std::printf("  query finished       %7.3f us\n", median(query));
  std::printf("  read mapped flags    %7.3f us\n", median(flags));
  return 0;
}
