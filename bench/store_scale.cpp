// Builds a run directory of CALLS attention calls spread over RANKS rank stores through the real
// store writer (StoreWriter, the path `nanprov run` takes), for bench/store_scale.sh. The calls are
// those of a CPU training run of LAYERS layers: per step each layer's forward (Q K V O LSE) then
// the backwards in reverse (dO Q K V O LSE dQ dK dV), float32, real shapes. Near the end of rank 0
// (at 95% of its calls) one forward turns finite inputs into NaN, and everything after it on that
// rank propagates, as a real edge does.
//   nanprov-store-bench DIR CALLS RANKS [LAYERS [BUDGET_BYTES [WRITTEN]]]
// WRITTEN: write only the first WRITTEN rank stores (each still holds CALLS / RANKS calls of a
// world of RANKS); bench/store_scale.sh copies the last one for the others. A run of 1e9 calls
// takes hours through one writer, and ranks past the first are alike.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/numbers.h"
#include "store/writer.h"

namespace {

using nanprov::CallRecord;
using nanprov::Phase;
using nanprov::TensorHealth;

TensorHealth tensor(const char* role, double max_abs, bool nan = false) {
  TensorHealth t;
  t.role = *nanprov::parseRole(role);
  t.dtype = nanprov::DtypeName::intern("Float");
  t.shape = *nanprov::TensorShape::parse(role == std::string("LSE") ? "[4,8,256]" : "[4,8,256,64]");
  t.numel = role == std::string("LSE") ? 8192 : 524288;
  t.max_abs = max_abs;
  t.nan = nan ? 1024 : 0;
  return t;
}

CallRecord callOf(int rank, int64_t seq, int64_t layers, int64_t edge_seq, int64_t* fwd_seqs) {
  CallRecord c;
  const int64_t per_step = 2 * layers;
  c.rank = rank;
  c.seq = seq;
  c.step = seq / per_step;
  int64_t slot = seq % per_step;
  bool forward = slot < layers;
  c.layer = forward ? slot : per_step - 1 - slot;
  c.call = 2 * c.step + (forward ? 0 : 1);
  c.phase = forward ? Phase::kForward : Phase::kBackward;
  c.op = forward ? "aten::_scaled_dot_product_flash_attention_for_cpu"
                 : "aten::_scaled_dot_product_flash_attention_for_cpu_backward";
  c.backend = "flash_cpu";
  c.module = "model.layers." + std::to_string(c.layer) + ".self_attn";
  c.device = nanprov::Device::cpu();
  c.start_ns = 1'700'000'000'000'000'000 + seq * 1000;
  c.end_ns = c.start_ns + 800;
  if (forward) fwd_seqs[c.layer] = seq;
  else c.fwd_seq = fwd_seqs[c.layer];
  bool source = seq == edge_seq, after = edge_seq >= 0 && seq > edge_seq;
  double x = 1.0 + static_cast<double>(seq % 97) / 97.0;
  if (forward) {
    for (const char* role : {"Q", "K", "V"}) c.tensors.push_back(tensor(role, x, after));
    c.tensors.push_back(tensor("O", x, source || after));
    c.tensors.push_back(tensor("LSE", 6 + x, source || after));
  } else {
    for (const char* role : {"dO", "Q", "K", "V", "O", "LSE"}) c.tensors.push_back(tensor(role, x, after));
    for (const char* role : {"dQ", "dK", "dV"}) c.tensors.push_back(tensor(role, x, after));
  }
  c.health = source ? 1 : after ? 2 : 0;  // as the probes classify it
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 7) {
    std::fprintf(stderr, "usage: nanprov-store-bench DIR CALLS RANKS [LAYERS [BUDGET_BYTES [WRITTEN]]]\n");
    return 2;
  }
  namespace fs = std::filesystem;
  auto calls = nanprov::parseInteger(argv[2], 1, int64_t{1} << 40);
  auto ranks = nanprov::parseInteger(argv[3], 1, 4096);
  auto layers = nanprov::parseInteger(argc >= 5 ? argv[4] : "8", 1, 1024);
  // Each rank store's budget (nanprov run --store-budget); 0, the default here, keeps every row.
  auto budget = nanprov::parseInteger(argc >= 6 ? argv[5] : "0", 0, int64_t{1} << 50);
  auto written = ranks ? nanprov::parseInteger(argc == 7 ? argv[6] : argv[3], 1, *ranks) : std::nullopt;
  if (!calls || !ranks || !layers || !budget || !written) {
    std::fprintf(stderr,
                 "nanprov-store-bench: CALLS, RANKS and LAYERS are positive integers, BUDGET_BYTES a byte count, "
                 "WRITTEN at most RANKS\n");
    return 2;
  }
  fs::path dir = argv[1];
  fs::create_directories(dir);
  std::ofstream(dir / "run.json") << "{\"command\": [\"nanprov-store-bench\"], \"exit_code\": 0}\n";
  auto begin = std::chrono::steady_clock::now();
  int64_t total = 0;
  for (int rank = 0; rank < *written; ++rank) {
    int64_t mine = *calls / *ranks + (rank < *calls % *ranks ? 1 : 0);
    // The edge: a forward at 95% of rank 0's calls.
    int64_t edge = rank == 0 ? (mine * 95 / 100) / (2 * *layers) * (2 * *layers) + 1 : -1;
    auto writer =
        nanprov::store::StoreWriter::open((dir / ("rank-" + std::to_string(rank) + ".sqlite")).string(),
                                          {{"rank", std::to_string(rank)}, {"world_size", std::to_string(*ranks)}},
                                          *budget, {}, {.step_unit = nanprov::StepUnit::kOptimizerStep});
    if (!writer.ok()) {
      std::fprintf(stderr, "nanprov-store-bench: %s\n", writer.status().message().c_str());
      return 1;
    }
    total += mine;
    std::vector<int64_t> fwd_seqs(static_cast<size_t>(*layers), -1);
    for (int64_t seq = 0; seq < mine; ++seq) {
      (*writer)->append(callOf(rank, seq, *layers, edge, fwd_seqs.data()));
      if (seq % (2 * *layers) == 2 * *layers - 1) (*writer)->stepEnded(seq / (2 * *layers), 0);
      // The writer drops rows beyond its queue rather than block training; the bench waits for it
      // instead, so the time measured is the writer's sustained rate.
      while ((*writer)->pendingCalls() > 100'000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    nanprov::Status st = (*writer)->close();
    if (!st.ok() || (*writer)->droppedRows() > 0) {
      std::fprintf(stderr, "nanprov-store-bench: rank %d: %s, %lld rows dropped\n", rank,
                   st.ok() ? "written" : st.message().c_str(), static_cast<long long>((*writer)->droppedRows()));
      return 1;
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  std::printf("wrote %lld calls in %.2f s: %.0f calls/s through StoreWriter\n", static_cast<long long>(total), seconds,
              static_cast<double>(total) / seconds);
  return 0;
}
