#include "probes/core/run_facts.h"

#include <mutex>
#include <set>

namespace nanprov::probes {
namespace {

std::mutex g_mu;

std::map<std::string, std::string>& facts() {
  static auto* kept = new std::map<std::string, std::string>();  // leaked: read at exit, after static destruction
  return *kept;
}

}  // namespace

bool isRunFactKey(const std::string& key) {
  // cuda_build: torch.version.cuda; cudnn_loaded: cudnnGetVersion() of the library in the process
  // (the "cudnn" meta is the version torch was compiled against); cudnn_library: its path.
  static const std::set<std::string> keys = {"cuda_build", "cudnn_loaded", "cudnn_library",
                                             "triton",     "ptxas",        "flash_attn_4"};
  return keys.count(key) > 0;
}

bool setRunFact(const std::string& key, const std::string& value) {
  if (!isRunFactKey(key) || value.empty() || value.size() > 512) return false;
  for (unsigned char c : value) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  facts()[key] = value;
  return true;
}

std::map<std::string, std::string> runFacts() {
  std::lock_guard<std::mutex> lock(g_mu);
  return facts();
}

}  // namespace nanprov::probes
