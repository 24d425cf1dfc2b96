// Whether a kernel's parameter size costs launch time on the host (issue 26): the fused check
// passes every tensor's view by value, about 1.7 KB. Times launches of empty kernels whose
// parameters are 16 B, 512 B, the check's own CheckArgs size and 4 KB, side by side in one run:
//   alone      one launch timed after the stream drained (a launch-bound step's case)
//   in a row   launches back to back, 64 at a time, per launch (the GPU's queue never fills)
// It also times the two clock reads every probed call makes at each stage boundary and around the
// op (steady_clock for probe_cost, CLOCK_REALTIME for the call's start and end): on a machine
// whose clock source is slow they would be a cost of their own.
//   nanprov-launch-params [launches] [rounds]
#include <cuda_runtime.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/health_check.h"

namespace {

// About the fused check's arguments: kMaxTensors views and the per-tensor tables (health_check.cu's
// CheckArgs, which is not in a header), without its padding.
constexpr size_t kCheckArgsBytes = sizeof(nanprov::kernels::TensorView) * nanprov::kernels::kMaxTensors +
                                   sizeof(unsigned int) * (nanprov::kernels::kMaxTensors + 1) +
                                   sizeof(int) * (nanprov::kernels::kMaxTensors + 2) + 2 * sizeof(void*);

template <size_t Bytes>
struct Params {
  unsigned char bytes[Bytes];
};

template <size_t Bytes>
__global__ void empty(Params<Bytes> p) {
  if (p.bytes[0] == 0xff && threadIdx.x == 1024) p.bytes[1] = 0;  // never true: keeps p used
}

double nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <size_t Bytes>
void measure(const char* name, int launches, int rounds, cudaStream_t stream) {
  Params<Bytes> p{};
  std::vector<double> alone, in_row;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < launches; ++i) {
      cudaStreamSynchronize(stream);
      double t0 = nowUs();
      empty<Bytes><<<1, 32, 0, stream>>>(p);
      alone.push_back(nowUs() - t0);
      if (cudaGetLastError() != cudaSuccess) {
        std::printf("%-28s %6zu B   launch failed\n", name, Bytes);
        return;
      }
    }
    for (int i = 0; i < launches; i += 64) {
      cudaStreamSynchronize(stream);
      double t0 = nowUs();
      for (int k = 0; k < 64; ++k) empty<Bytes><<<1, 32, 0, stream>>>(p);
      in_row.push_back((nowUs() - t0) / 64);
    }
  }
  cudaStreamSynchronize(stream);
  std::printf("%-28s %6zu B   alone %6.2f us   in a row %6.2f us\n", name, Bytes, median(alone), median(in_row));
}

// Median cost of one read of each clock, in nanoseconds, over `reads` reads a round.
void measureClocks(int reads, int rounds) {
  std::vector<double> steady, realtime;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    int64_t sink = 0;
    for (int i = 0; i < reads; ++i) sink += std::chrono::steady_clock::now().time_since_epoch().count();
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < reads; ++i) {
      timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      sink += ts.tv_nsec;
    }
    auto t2 = std::chrono::steady_clock::now();
    steady.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / reads);
    realtime.push_back(std::chrono::duration<double, std::nano>(t2 - t1).count() / reads + (sink == 42 ? 1e-9 : 0));
  }
  std::printf("clock read: steady_clock %.1f ns, CLOCK_REALTIME %.1f ns\n", median(steady), median(realtime));
}

}  // namespace

int main(int argc, char** argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  if (launches <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: nanprov-launch-params [launches > 0] [rounds > 0]\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "nanprov-launch-params: no CUDA device; this benchmark runs on a GPU machine\n");
    return 2;
  }
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    std::fprintf(stderr, "nanprov-launch-params: cannot create a stream\n");
    return 1;
  }
  for (int warm = 0; warm < 2; ++warm) {  // the first pass loads the kernels; the second is timed
    if (warm == 1) std::printf("median per launch, %d launches x %d rounds each\n", launches, rounds);
    const int n = warm == 0 ? 16 : launches;
    const int k = warm == 0 ? 1 : rounds;
    if (warm == 0) {
      measure<16>("warm-up", n, k, stream);
      measure<512>("warm-up", n, k, stream);
      measure<kCheckArgsBytes>("warm-up", n, k, stream);
      measure<4000>("warm-up", n, k, stream);
      continue;
    }
    measure<16>("pointer-sized", n, k, stream);
    measure<512>("compact views", n, k, stream);
    measure<kCheckArgsBytes>("the fused check's CheckArgs", n, k, stream);
    measure<4000>("near the 4 KB limit", n, k, stream);
  }
  cudaStreamDestroy(stream);
  measureClocks(100000, rounds);
  return 0;
}
