// Shared by the end-to-end tests: run real training under `nanprov run` and read what the
// nanprov commands say. Nothing is mocked.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace e2e {
namespace fs = std::filesystem;
using nlohmann::json;

struct Result {
  int code = -1;
  std::string out;  // stdout, and stderr when asked
};

inline Result sh(const std::string& command) {
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline std::string nanprov() { return NANPROV_BIN; }
inline std::string python() { return NANPROV_PYTHON; }
inline std::string example(const std::string& name) { return std::string(NANPROV_EXAMPLES) + "/" + name; }

inline fs::path runDir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("nanprov-e2e-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  return dir;
}

// A TCP port nothing listens on now: the kernel's pick for port 0, released for a rendezvous store.
inline int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

// While alive, the environment variable `name` is `value` for every command run; then it is back.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// While alive, every torch.compile in the commands run gets a cache of its own, cold. Inductor's
// FX graph cache is keyed on the traced graph, not on what the dispatcher holds: a warm cache
// filled by another run would hide a probe that changed what Dynamo and AOTAutograd traced.
class ColdInductorCache : public ScopedEnv {
 public:
  explicit ColdInductorCache(const std::string& name)
      : ScopedEnv("TORCHINDUCTOR_CACHE_DIR", runDir("inductor-" + name).string()) {}
};

// A training run under nanprov, and `nanprov report --json` on it. `script` names an example, or
// is an absolute path (a test's own script).
struct TrainedRun {
  fs::path dir;
  Result train;
  Result report;
  json doc;
};

inline TrainedRun train(const std::string& name, const std::string& nanprov_opts, const std::string& script_args,
                        const std::string& script = "tiny_transformer.py") {
  TrainedRun run;
  run.dir = runDir(name);
  const std::string path = !script.empty() && script.front() == '/' ? script : example(script);
  run.train = sh(nanprov() + " run --out " + run.dir.string() + " " + nanprov_opts + " -- " + python() + " " + path +
                 " " + script_args + " 2>&1");
  run.report = sh(nanprov() + " report " + run.dir.string() + " --json");
  run.doc = json::parse(run.report.out, nullptr, false);
  return run;
}

// What `nanprov run` exits with when the training itself exited 0: the fault the report found
// (1 an edge or non-finite gradients, 5 an audit finding), else 0.
inline int runCodeForCleanExit(const TrainedRun& run) {
  return run.report.code == 1 || run.report.code == 5 ? run.report.code : 0;
}

// Every match of `pattern` in `text`, in order (a training's loss lines, say).
inline std::vector<std::string> allMatches(const std::string& text, const std::string& pattern) {
  std::vector<std::string> found;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    found.push_back(it->str());
  }
  return found;
}

// `nanprov <command> <run dir> <args> --json`, parsed.
inline json commandJson(const std::string& command, const fs::path& dir, const std::string& args = "") {
  Result r = sh(nanprov() + " " + command + " " + dir.string() + " " + args + " --json");
  return json::parse(r.out, nullptr, false);
}

// Writes a capture-shaped safetensors file with plain PyTorch: `setup` is Python run first (may be
// empty), `tensors` the dict's entries ("'Q': q, 'K': k"), `metadata` its header entries.
inline Result saveCapture(const fs::path& file, const std::string& setup, const std::string& tensors,
                          const std::string& metadata = "'phase': 'fwd'") {
  fs::create_directories(file.parent_path());
  return sh(python() + " -c \"import torch; from safetensors.torch import save_file; " + setup +
            (setup.empty() ? "" : "; ") + "save_file({" + tensors + "}, '" + file.string() + "', metadata={" +
            metadata + "})\" 2>&1");
}

// Adds `copies` rows to the calls of the rank store `store`: copies of its step-0 calls, in turn,
// with fresh seqs after the store's last, each changed by `change`, Python over `new` (the row),
// `col` (a column's index by name) and `i` (the copy's number), e.g. "new[col('layer')] = 100 + i".
// A run of any length or depth, made from a real one's calls.
inline Result addCallCopies(const fs::path& store, int copies, const std::string& change) {
  const fs::path script = store.string() + ".copies.py";
  std::ofstream(script) << "import sqlite3, sys\n"
                           "c = sqlite3.connect(sys.argv[1])\n"
                           "cur = c.execute('SELECT * FROM calls WHERE step = 0 ORDER BY seq')\n"
                           "cols = [d[0] for d in cur.description]\n"
                           "col = cols.index\n"
                           "base = cur.fetchall()\n"
                           "top = c.execute('SELECT MAX(seq) FROM calls').fetchone()[0]\n"
                           "rows = []\n"
                           "for i in range("
                        << copies
                        << "):\n"
                           "    new = list(base[i % len(base)])\n"
                           "    new[col('seq')] = top + 1 + i\n"
                           "    "
                        << change
                        << "\n"
                           "    rows.append(new)\n"
                           "c.executemany('INSERT INTO calls VALUES (%s)' % ','.join('?' * len(cols)), rows)\n"
                           "c.commit()\n";
  Result r = sh(python() + " " + script.string() + " " + store.string() + " 2>&1");
  fs::remove(script);
  return r;
}

// `n` as the 8 bytes a file holds it in (a safetensors header length, a mapped counter).
inline std::string littleEndian(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out;
}

// An executable shell script at dir/name, for a stand-in interpreter or tool.
inline fs::path fakeExecutable(const fs::path& dir, const std::string& name, const std::string& script) {
  fs::create_directories(dir);
  std::ofstream(dir / name) << script;
  fs::permissions(dir / name, fs::perms::owner_all);
  return dir / name;
}

// The fields of a report's edge, finding or replay a test pins, each compared as JSON.
inline void expectFields(const json& j, std::initializer_list<std::pair<const char*, json>> want) {
  for (const auto& [key, value] : want) EXPECT_EQ(j[key], value) << key << " in " << j.dump(1);
}

// A report's first edge is the forward where the training script's oracle (plain-PyTorch forward
// hooks, --oracle) saw the first non-finite output made: its module and step, layer 0, found by
// attention's own checks; `also` pins the edge's other fields. Call it under
// ASSERT_NO_FATAL_FAILURE: without the oracle's line there is nothing to compare.
inline void expectEdgeWhereTheOracleSays(const std::string& training_output, const json& edge,
                                         std::initializer_list<std::pair<const char*, json>> also) {
  std::smatch oracle;
  ASSERT_TRUE(
      std::regex_search(training_output, oracle, std::regex("first non-finite forward output: (\\S+) at step (\\d+)")))
      << training_output;
  expectFields(edge, {{"module", oracle[1].str()},
                      {"step", std::stoi(oracle[2].str())},
                      {"phase", "fwd"},
                      {"layer", 0},
                      {"origin", "attention"}});
  expectFields(edge, also);
}

inline std::vector<std::string> strings(const json& j) { return j.get<std::vector<std::string>>(); }

// A run of examples/tiny_transformer.py with --regulariser-nan-step 2: the gradient sentinel names
// head.weight at step 2, and the report says the origin is outside attention.
inline void expectSentinelNamesTheRegulariser(const TrainedRun& r) {
  ASSERT_EQ(r.train.code, runCodeForCleanExit(r)) << r.train.out;
  ASSERT_EQ(r.report.code, 1) << r.report.out;
  EXPECT_EQ(r.doc["outcome"], "outside_attention");
  const json& s = r.doc["gradient_sentinel"];
  ASSERT_TRUE(s.is_object()) << r.report.out;
  EXPECT_EQ(s["step"], 2);
  EXPECT_EQ(s["rank"], 0);
  EXPECT_EQ(strings(s["gradients"]), std::vector<std::string>{"head.weight"});
}

// A multi-rank job's `nanprov run` output: no rank was refused its store or shared one.
inline void expectEveryRankRecorded(const std::string& run_output) {
  for (const char* banner : {"already exists", "cannot write the store", "NOT RECORDED", "were not stored"}) {
    EXPECT_EQ(run_output.find(banner), std::string::npos) << banner << " in\n" << run_output;
  }
}

// `report --json` of a job of `ranks` ranks, every one of them read; exit 1 (an edge) expected.
inline json reportOfEveryRank(const fs::path& dir, int ranks) {
  Result rep = sh(nanprov() + " report " + dir.string() + " --json");
  EXPECT_EQ(rep.code, 1) << rep.out;
  json doc = json::parse(rep.out, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << rep.out;
  if (doc.is_discarded()) return json::object();
  EXPECT_EQ(doc["summary"]["ranks"], ranks);
  EXPECT_EQ(doc["world_size"], ranks);
  EXPECT_EQ(doc["missing_ranks"], json::array());
  return doc;
}

inline bool torchHasCuda() {
  static int have =
      sh(python() + " -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null").code == 0
          ? 1
          : 0;
  return have == 1;
}

// GPU tests skip cleanly on the CPU (CI) and run on the H200 (scripts/device-check.sh,
// scripts/device-audit.sh).
#define REQUIRE_CUDA() \
  if (!e2e::torchHasCuda()) GTEST_SKIP() << "torch sees no CUDA device: runs in scripts/device-check.sh"

}  // namespace e2e
