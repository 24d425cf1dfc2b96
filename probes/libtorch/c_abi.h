// The C ABI of libnanprov_probes: all the Python bootstrap calls, through ctypes. The bootstrap's
// table of the same functions (probes/bootstrap/nanprov_boot/probe_library.py) is checked
// against this header by tests/probes/abi_table_test.py, so keep one declaration per line.
#pragma once

#include <stddef.h>

#define NANPROV_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

// Fills `buffer` with the module path of the calling thread's innermost running module and
// returns its length; the bootstrap implements it by walking the Python stack.
typedef int (*nanprov_module_resolver)(char* buffer, size_t capacity);

// Returns 0 when the probes are live. On failure returns 1 and nanprov_last_error() says why.
NANPROV_API int nanprov_start(void);
NANPROV_API const char* nanprov_last_error(void);
// `step` is the number of optimizer steps completed so far.
NANPROV_API void nanprov_step(long long step);
NANPROV_API void nanprov_set_module_resolver(nanprov_module_resolver resolve);
// Attention the bootstrap recognised but the probes cannot check (FlexAttention, attention inside
// a compiled graph that is no ATen op): counted, so the report does not call the run clean.
NANPROV_API void nanprov_count_unprobed(const char* what, long long n);
// Around a torch.compile'd graph: whether the user's code runs it with gradients (1), without
// (0), or -1 when it returned. Inside a compiled training graph autograd turns gradients off,
// which must not read as inference.
NANPROV_API void nanprov_compiled_grad_mode(int mode);
// --probe-op: probes the dispatcher op `name` ("mylib::attn") as backend `backend`, with
// `roles` "q=ARG,k=ARG,v=ARG,o=ARG" naming its schema arguments (any may be left out). Returns ""
// when it is probed, else why not (the op may not be registered yet: the bootstrap retries).
NANPROV_API const char* nanprov_probe_op(const char* name, const char* roles, const char* backend);
// Forward calls recorded through torch.ops.nanprov.record_call on this thread so far.
NANPROV_API long long nanprov_foreign_calls(void);
// --trail: a torch.compile'd graph was compiled, whose modules run no hook: they are checked from
// inside its forward and backward graphs (compiled_trail.py). Noted in the store's meta
// (trail_compiled), so the report can say what such checks cannot see.
NANPROV_API void nanprov_trail_compiled(void);
// This process is a DataLoader worker, from the start of its worker loop: it checks nothing and
// takes no store; its attention calls are counted for its rank (Session::becomeWorker).
NANPROV_API void nanprov_become_worker(void);
// CUDA graphs (torch.cuda.CUDAGraph), each named by a `key` the bootstrap gives it: it began
// capturing on the current stream; it is about to be replayed; it was reset. Attention captured
// into a graph is checked at every replay (probes/libtorch/graph_checks.h).
NANPROV_API void nanprov_graph_capture_began(long long key);
NANPROV_API void nanprov_graph_replayed(long long key);
NANPROV_API void nanprov_graph_reset(long long key);
// This thread entered (1) or left (0) code whose allocations go to a CUDA graph's private memory
// pool (cudagraph trees' eager warm-up): tensors checked there are not held past their call.
NANPROV_API void nanprov_graph_pool(int entering);
// A fact about the process's attention stack, read once by the bootstrap at start (run_facts.h
// names the keys): kept for the store's meta and every capture. Returns 0, or 1 for a key or value refused.
NANPROV_API int nanprov_set_fact(const char* key, const char* value);
// The default process group came up: this process is `rank` of `world_size`, `local_rank` on its
// node (-1 when unknown). Its store and tally take that rank's names (probes/core/process_rank.h).
NANPROV_API void nanprov_process_group(int rank, int world_size, int local_rank);
// This rank's place in a DeviceMesh, as "dp=0,tp=1" (dimension names, or dim0, dim1...): kept in
// the store's counters (RunCounters::mesh).
NANPROV_API void nanprov_mesh(const char* coordinates);
// Final flush; called from the interpreter's exit. Later calls are no-ops.
NANPROV_API void nanprov_shutdown(void);

#ifdef __cplusplus
}  // extern "C"
#endif
