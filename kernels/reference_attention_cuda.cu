// The float64 reference attention on a CUDA device: the same semantics as the CPU version
// (reference_attention.cpp), one thread per query row (forward, dQ) or key row (dK, dV), so every
// value is a plain sequential sum, like the CPU's. Written for being right, not fast: replay runs
// it once per call.
#include <cuda_runtime_api.h>

#include <cmath>
#include <string>

#include "kernels/reference_attention.h"

namespace nanprov::reference {
namespace {

struct Dims {
  int64_t b, hq, hkv, sq, sk, d, dv;
  double scale;
  int causal;
  int64_t window_left, window_right;
  int mask_kind;  // 0 none, 1 bool, 2 additive
  int64_t ms[4];
};

__device__ double logitOf(const Dims& s, const double* q, const double* k, const uint8_t* allow, const double* add,
                          int64_t b, int64_t h, int64_t kvh, int64_t i, int64_t j) {
  bool visible = (!s.causal || j <= i) && (s.window_left < 0 || j >= i - s.window_left) &&
                 (s.window_right < 0 || j <= i + s.window_right);
  int64_t m = b * s.ms[0] + h * s.ms[1] + i * s.ms[2] + j * s.ms[3];
  if (s.mask_kind == 1) visible = visible && allow[m] != 0;
  if (!visible) return -INFINITY;
  const double* qi = q + ((b * s.hq + h) * s.sq + i) * s.d;
  const double* kj = k + ((b * s.hkv + kvh) * s.sk + j) * s.d;
  double dot = 0;
  for (int64_t x = 0; x < s.d; ++x) dot += qi[x] * kj[x];
  return dot * s.scale + (s.mask_kind == 2 ? add[m] : 0.0);
}

__global__ void forwardRows(Dims s, const double* q, const double* k, const double* v, const uint8_t* allow,
                            const double* add, double* out, double* lse) {
  int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= s.b * s.hq * s.sq) return;
  int64_t i = row % s.sq, h = (row / s.sq) % s.hq, b = row / (s.sq * s.hq), kvh = h / (s.hq / s.hkv);
  double* oi = out + row * s.dv;
  for (int64_t x = 0; x < s.dv; ++x) oi[x] = 0;
  double max = -INFINITY;
  for (int64_t j = 0; j < s.sk; ++j) max = fmax(max, logitOf(s, q, k, allow, add, b, h, kvh, i, j));
  if (max == -INFINITY) {
    lse[row] = -INFINITY;
    return;
  }
  double sum = 0;
  for (int64_t j = 0; j < s.sk; ++j) {
    double p = exp(logitOf(s, q, k, allow, add, b, h, kvh, i, j) - max);
    if (p == 0) continue;
    sum += p;
    const double* vj = v + ((b * s.hkv + kvh) * s.sk + j) * s.dv;
    for (int64_t x = 0; x < s.dv; ++x) oi[x] += p * vj[x];
  }
  for (int64_t x = 0; x < s.dv; ++x) oi[x] /= sum;
  lse[row] = max + log(sum);
}

__device__ double dotRow(const double* a, const double* b, int64_t n) {
  double dot = 0;
  for (int64_t x = 0; x < n; ++x) dot += a[x] * b[x];
  return dot;
}

// dQ per query row, and delta_i = sum_j P_ij (dO_i · V_j), which dK needs.
__global__ void gradQ(Dims s, const double* q, const double* k, const double* v, const uint8_t* allow, const double* add,
                      const double* dout, const double* lse, double* delta, double* dq) {
  int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= s.b * s.hq * s.sq) return;
  int64_t i = row % s.sq, h = (row / s.sq) % s.hq, b = row / (s.sq * s.hq), kvh = h / (s.hq / s.hkv);
  double* dqi = dq + row * s.d;
  for (int64_t x = 0; x < s.d; ++x) dqi[x] = 0;
  delta[row] = 0;
  if (lse[row] == -INFINITY) return;
  const double* doi = dout + row * s.dv;
  double weighted = 0;
  for (int64_t j = 0; j < s.sk; ++j) {
    double p = exp(logitOf(s, q, k, allow, add, b, h, kvh, i, j) - lse[row]);
    if (p == 0) continue;
    weighted += p * dotRow(doi, v + ((b * s.hkv + kvh) * s.sk + j) * s.dv, s.dv);
  }
  delta[row] = weighted;
  for (int64_t j = 0; j < s.sk; ++j) {
    double p = exp(logitOf(s, q, k, allow, add, b, h, kvh, i, j) - lse[row]);
    if (p == 0) continue;
    int64_t kv_row = (b * s.hkv + kvh) * s.sk + j;
    double ds = p * (dotRow(doi, v + kv_row * s.dv, s.dv) - weighted) * s.scale;
    const double* kj = k + kv_row * s.d;
    for (int64_t x = 0; x < s.d; ++x) dqi[x] += ds * kj[x];
  }
}

// dK and dV per key row, summed over the query heads of its GQA group.
__global__ void gradKV(Dims s, const double* q, const double* k, const double* v, const uint8_t* allow,
                       const double* add, const double* dout, const double* lse, const double* delta, double* dk,
                       double* dv) {
  int64_t kv_row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (kv_row >= s.b * s.hkv * s.sk) return;
  int64_t j = kv_row % s.sk, kvh = (kv_row / s.sk) % s.hkv, b = kv_row / (s.sk * s.hkv);
  int64_t group = s.hq / s.hkv;
  double* dkj = dk + kv_row * s.d;
  double* dvj = dv + kv_row * s.dv;
  for (int64_t x = 0; x < s.d; ++x) dkj[x] = 0;
  for (int64_t x = 0; x < s.dv; ++x) dvj[x] = 0;
  const double* vj = v + kv_row * s.dv;
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int64_t i = 0; i < s.sq; ++i) {
      int64_t row = (b * s.hq + h) * s.sq + i;
      if (lse[row] == -INFINITY) continue;
      double p = exp(logitOf(s, q, k, allow, add, b, h, kvh, i, j) - lse[row]);
      if (p == 0) continue;
      const double* doi = dout + row * s.dv;
      double ds = p * (dotRow(doi, vj, s.dv) - delta[row]) * s.scale;
      const double* qi = q + row * s.d;
      for (int64_t x = 0; x < s.dv; ++x) dvj[x] += p * doi[x];
      for (int64_t x = 0; x < s.d; ++x) dkj[x] += ds * qi[x];
    }
  }
}

// Device copies of the inputs, freed on every path.
class DeviceBuffers {
 public:
  ~DeviceBuffers() {
    for (void* p : owned_) cudaFree(p);
  }
  template <typename T>
  T* upload(const T* host, size_t n) {
    T* dev = alloc<T>(n);
    if (dev && n && cudaMemcpy(dev, host, n * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) failed_ = true;
    return dev;
  }
  template <typename T>
  T* alloc(size_t n) {
    void* p = nullptr;
    if (cudaMalloc(&p, (n ? n : 1) * sizeof(T)) != cudaSuccess) {
      failed_ = true;
      return nullptr;
    }
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  bool failed() const { return failed_; }

 private:
  std::vector<void*> owned_;
  bool failed_ = false;
};

Status cudaStatus(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err == cudaSuccess) return Status::Ok();
  return Status::Error(std::string("reference attention on CUDA: ") + what + ": " + cudaGetErrorString(err));
}

// The elements a broadcast mask view reaches: its last offset plus one.
size_t maskExtent(const AttentionShape& s, const MaskView& mask) {
  int64_t sizes[4] = {s.batch, s.q_heads, s.q_len, s.kv_len};
  int64_t last = 0;
  for (int d = 0; d < 4; ++d) last += (sizes[d] - 1) * mask.strides[d];
  return static_cast<size_t>(last + 1);
}

struct Prepared {
  Dims dims;
  const double *q, *k, *v, *add = nullptr;
  const uint8_t* allow = nullptr;
};

Prepared prepare(DeviceBuffers& buf, const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, const MaskView& mask, const AttentionOptions& o) {
  Prepared p;
  p.dims = Dims{s.batch, s.q_heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim, s.v_dim,
                o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim)),
                o.causal ? 1 : 0, o.window_left, o.window_right,
                mask.kind == MaskView::Kind::kBool ? 1 : mask.kind == MaskView::Kind::kAdditive ? 2 : 0,
                {mask.strides[0], mask.strides[1], mask.strides[2], mask.strides[3]}};
  p.q = buf.upload(q.data(), q.size());
  p.k = buf.upload(k.data(), k.size());
  p.v = buf.upload(v.data(), v.size());
  if (mask.kind == MaskView::Kind::kBool) p.allow = buf.upload(mask.allow, maskExtent(s, mask));
  if (mask.kind == MaskView::Kind::kAdditive) p.add = buf.upload(mask.additive, maskExtent(s, mask));
  return p;
}

unsigned blocksFor(int64_t rows) { return static_cast<unsigned>((rows + 127) / 128); }

template <typename T>
Status download(std::vector<T>& host, const T* dev, size_t n) {
  host.resize(n);
  if (n && cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) {
    return cudaStatus("copying results back");
  }
  return Status::Ok();
}

}  // namespace

bool cudaReferenceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

StatusOr<Forward> forwardCuda(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const MaskView& mask, const AttentionOptions& o) {
  NANPROV_RETURN_IF_ERROR(validate(s, q.size(), k.size(), v.size()));
  DeviceBuffers buf;
  Prepared p = prepare(buf, s, q, k, v, mask, o);
  const int64_t rows = s.batch * s.q_heads * s.q_len;
  double* out = buf.alloc<double>(static_cast<size_t>(rows * s.v_dim));
  double* lse = buf.alloc<double>(static_cast<size_t>(rows));
  if (buf.failed()) return cudaStatus("allocating");
  forwardRows<<<blocksFor(rows), 128>>>(p.dims, p.q, p.k, p.v, p.allow, p.add, out, lse);
  NANPROV_RETURN_IF_ERROR(cudaStatus("forward"));
  Forward f;
  NANPROV_RETURN_IF_ERROR(download(f.out, out, static_cast<size_t>(rows * s.v_dim)));
  NANPROV_RETURN_IF_ERROR(download(f.lse, lse, static_cast<size_t>(rows)));
  return f;
}

StatusOr<Gradients> backwardCuda(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
                                 const std::vector<double>& v, const MaskView& mask, const AttentionOptions& o,
                                 const std::vector<double>& dout) {
  NANPROV_RETURN_IF_ERROR(validate(s, q.size(), k.size(), v.size()));
  const int64_t rows = s.batch * s.q_heads * s.q_len, kv_rows = s.batch * s.kv_heads * s.kv_len;
  if (dout.size() != static_cast<size_t>(rows * s.v_dim)) {
    return Status::Error("reference attention: dO holds a different number of elements than O");
  }
  DeviceBuffers buf;
  Prepared p = prepare(buf, s, q, k, v, mask, o);
  const double* d_dout = buf.upload(dout.data(), dout.size());
  double* out = buf.alloc<double>(static_cast<size_t>(rows * s.v_dim));
  double* lse = buf.alloc<double>(static_cast<size_t>(rows));
  double* delta = buf.alloc<double>(static_cast<size_t>(rows));
  double* dq = buf.alloc<double>(q.size());
  double* dk = buf.alloc<double>(k.size());
  double* dv = buf.alloc<double>(v.size());
  if (buf.failed()) return cudaStatus("allocating");
  forwardRows<<<blocksFor(rows), 128>>>(p.dims, p.q, p.k, p.v, p.allow, p.add, out, lse);
  gradQ<<<blocksFor(rows), 128>>>(p.dims, p.q, p.k, p.v, p.allow, p.add, d_dout, lse, delta, dq);
  gradKV<<<blocksFor(kv_rows), 128>>>(p.dims, p.q, p.k, p.v, p.allow, p.add, d_dout, lse, delta, dk, dv);
  NANPROV_RETURN_IF_ERROR(cudaStatus("backward"));
  Gradients g;
  NANPROV_RETURN_IF_ERROR(download(g.dq, dq, q.size()));
  NANPROV_RETURN_IF_ERROR(download(g.dk, dk, k.size()));
  NANPROV_RETURN_IF_ERROR(download(g.dv, dv, v.size()));
  return g;
}

}  // namespace nanprov::reference
