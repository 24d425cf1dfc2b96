// A stream stuck behind a kernel that never ends on its own, as one is behind a hung collective:
// what the health check queue must not wait for past its deadline at exit, and what keeps a
// check unfinished for as long as a test needs.
#pragma once

namespace nanprov::kernels::fixtures {

class StuckStream {
 public:
  // A new stream, held behind a kernel spinning on host-mapped memory. ok() says whether it is.
  StuckStream();
  // Lets the stream go, waits for it, and frees it.
  ~StuckStream();
  StuckStream(const StuckStream&) = delete;
  StuckStream& operator=(const StuckStream&) = delete;

  bool ok() const { return ok_; }
  void* stream() const { return stream_; }  // a cudaStream_t
  // Lets the stream move again (any thread). Returns whether everything on it then ran cleanly,
  // once `wait`; without `wait`, true.
  bool release(bool wait = false);

 private:
  int* flag_ = nullptr;  // host-mapped; the kernel spins while it is 0
  void* stream_ = nullptr;
  bool ok_ = false;
};

}  // namespace nanprov::kernels::fixtures
