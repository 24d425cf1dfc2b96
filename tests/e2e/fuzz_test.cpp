// Fuzzing the reading commands with a fixed seed: 300 mutated captures through `nanprov replay`
// (those with hostile metadata text also through --emit-repro) and 104 mutated copies of a real
// run through every reader. Each answer must be an exit code
// nanprov documents, at most two lines on stderr, within 5 s and 512 MB. Nothing is mocked: the
// seeds are a real CPU training run and its captures.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

struct Measured {
  int code = -1;
  double seconds = 0;
  long max_rss_kb = 0;
  std::string err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void spit(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// Runs `nanprov <args>` as a direct child (so wait4 sees its own peak memory), stdout dropped,
// stderr kept; killed after 20 s so a hang fails the test instead of stalling it.
Measured measure(const std::vector<std::string>& args, const fs::path& err_file) {
  Measured m;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    int err = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(null, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    std::vector<std::string> argv = {nanprov()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> c;
    for (std::string& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    execv(c[0], c.data());
    _exit(127);
  }
  int status = 0;
  struct rusage usage{};
  while (wait4(pid, &status, WNOHANG, &usage) == 0) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  m.max_rss_kb = usage.ru_maxrss;
  m.err = slurp(err_file);
  return m;
}

// The documented answers: 0 clean or ok, 1 a fault, 3 unreadable input, 4 nothing checked.
void expectAnswered(const Measured& m, const std::string& what) {
  EXPECT_TRUE(m.code == 0 || m.code == 1 || m.code == 3 || m.code == 4) << what << " exit " << m.code << ": " << m.err;
  EXPECT_LE(std::count(m.err.begin(), m.err.end(), '\n'), 2) << what << ": " << m.err;
  EXPECT_LT(m.seconds, 5.0) << what;
  EXPECT_LT(m.max_rss_kb, 512 * 1024) << what;
}

// A capture's header text and data, split, and put back together with a header of any text.
struct Capture {
  std::string header, data;
  static Capture of(const std::string& bytes) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    return {bytes.substr(8, n), bytes.substr(8 + n)};
  }
  std::string bytes() const { return littleEndian(header.size()) + header + data; }
};

class Fuzz : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_ = new TrainedRun(train("fuzz-seed", "--capture-every 3", "--steps 3 --glitch-step 1"));
  }
  static void TearDownTestSuite() { delete run_; }
  static std::vector<fs::path> captures() {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(run_->dir / "captures")) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
  static TrainedRun* run_;
};
TrainedRun* Fuzz::run_ = nullptr;

std::string mutateCapture(const std::string& good, int kind, std::mt19937& rng) {
  Capture c = Capture::of(good);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  switch (kind) {
    case 0:  // truncated anywhere
      return good.substr(0, pick(good.size()));
    case 1: {  // bytes flipped anywhere
      std::string bad = good;
      for (int i = 1 + static_cast<int>(pick(8)); i > 0; --i) bad[pick(bad.size())] = static_cast<char>(rng());
      return bad;
    }
    case 2: {  // the header length lies
      const uint64_t lies[] = {
          0,           1, c.header.size() - 1, c.header.size() + 1, c.header.size() + c.data.size(), uint64_t{1} << 40,
          ~uint64_t{0}};
      return littleEndian(lies[pick(std::size(lies))]) + c.header + c.data;
    }
    case 3: {  // deep or huge headers
      size_t depth = (rng() % 2) ? 1000 + pick(100000) : 5'000'000;
      c.header =
          (rng() % 2) ? "{\"a\":" + std::string(depth, '[') + std::string(depth, ']') + "}" : std::string(depth, '[');
      return c.bytes();
    }
    case 4: {  // another dtype name where one stands
      const char* dtypes[] = {"I32", "U8", "BOOL", "I64", "F64", "F16", "XX", "", "F8_E4M3"};
      size_t at = c.header.find("\"F32\"");
      if (at == std::string::npos) at = c.header.find("\"BOOL\"");
      if (at != std::string::npos)
        c.header.replace(at, c.header.find('"', at + 1) - at + 1, "\"" + std::string(dtypes[pick(9)]) + "\"");
      return c.bytes();
    }
    case 5: {  // offsets overlapping, negative, reversed or past the end
      nlohmann::json h = nlohmann::json::parse(c.header);
      std::vector<std::string> names;
      for (auto it = h.begin(); it != h.end(); ++it)
        if (it.key() != "__metadata__") names.push_back(it.key());
      const std::string& name = names[pick(names.size())];
      int64_t size = static_cast<int64_t>(c.data.size());
      const int64_t offsets[][2] = {{0, 4}, {-8, 4}, {8, 0}, {size, size + 4}, {0, size}, {2, 6}};
      const auto& o = offsets[pick(std::size(offsets))];
      h[name]["data_offsets"] = {o[0], o[1]};
      c.header = h.dump();
      return c.bytes();
    }
    case 6: {  // invalid UTF-8 inside a metadata string
      size_t at = c.header.find("\"phase\":\"");
      if (at != std::string::npos) c.header.insert(at + 9, std::string("\xff\xfe\xc3", 3));
      return c.bytes();
    }
    case 7: {  // text where numbers belong, numbers where text belongs
      nlohmann::json h = nlohmann::json::parse(c.header);
      switch (pick(5)) {
        case 0: h["Q"]["shape"] = {"a", 2}; break;
        case 1: h["Q"]["data_offsets"] = {"0", "4"}; break;
        case 2: h["__metadata__"]["arg.scale"] = "abc"; break;
        case 3: h["__metadata__"]["arg.is_causal"] = "maybe"; break;
        default: h["__metadata__"]["phase"] = 7; break;
      }
      c.header = h.dump();
      return c.bytes();
    }
    case 8: {  // a tensor renamed or removed
      nlohmann::json h = nlohmann::json::parse(c.header);
      const char* roles[] = {"Q", "K", "V", "O", "__metadata__"};
      h.erase(roles[pick(5)]);
      c.header = h.dump();
      return c.bytes();
    }
    case 9: {  // the data swapped for noise of another length
      std::string noise(pick(c.data.size() * 2), '\0');
      for (char& b : noise) b = static_cast<char>(rng());
      c.data = noise;
      return c.bytes();
    }
    case 10: {  // line breaks and code in the metadata that --emit-repro writes into repro.py
      nlohmann::json h = nlohmann::json::parse(c.header);
      const char* breaks[] = {"\n", "\r", "\r\n", "\xe2\x80\xa8", "\x0b", "\x0c"};
      const std::string brk = breaks[pick(std::size(breaks))];
      for (const char* key : {"call", "torch", "cuda_runtime", "cudnn", "gpu"}) {
        h["__metadata__"][key] = "x" + brk + "import os; os.system('touch MARK')" + brk + "#";
      }
      c.header = h.dump();
      return c.bytes();
    }
    default: {  // direction overrides and line separators in every text field
      nlohmann::json h = nlohmann::json::parse(c.header);
      for (auto& [key, value] : h["__metadata__"].items()) {
        if (value.is_string()) value = value.get<std::string>() + "\xe2\x80\xae\xe2\x80\xa9" + key;
      }
      c.header = h.dump();
      return c.bytes();
    }
  }
}

// What `--emit-repro` wrote holds printable ASCII and line breaks nanprov made: no metadata value
// can end a comment or a string there.
void expectInertRepro(const fs::path& dir, const std::string& what) {
  std::string script = slurp(dir / "repro.py");
  for (char ch : script) {
    const auto u = static_cast<unsigned char>(ch);
    ASSERT_TRUE(ch == '\n' || (u >= 0x20 && u < 0x7f)) << what << ": byte " << int(u) << " in repro.py";
  }
}

TEST_F(Fuzz, ThreeHundredMutatedCapturesGetAnAnswer) {
  std::vector<fs::path> seeds = captures();
  ASSERT_FALSE(seeds.empty()) << run_->train.out;
  fs::path dir = runDir("fuzz-captures");
  fs::create_directories(dir);
  std::mt19937 rng(1234);
  std::map<int, int> refused;
  constexpr int kKinds = 12, kEach = 25;
  for (int i = 0; i < kKinds * kEach; ++i) {
    std::string good = slurp(seeds[static_cast<size_t>(i) % seeds.size()]);
    fs::path file = dir / ("mutant-" + std::to_string(i) + ".safetensors");
    int kind = i % kKinds;
    spit(file, mutateCapture(good, kind, rng));
    std::vector<std::string> args = {"replay", file.string()};
    if (i % 2) args.push_back("--json");
    const fs::path repro = dir / ("repro-" + std::to_string(i));
    if (kind >= 10) args.insert(args.end(), {"--emit-repro", repro.string()});
    Measured m = measure(args, dir / "stderr.txt");
    expectAnswered(m, "mutation " + std::to_string(kind) + " of " + file.string());
    refused[kind] += m.code == 3;
    if (kind == 10)
      EXPECT_TRUE(fs::exists(repro / "repro.py")) << "metadata text is no reason not to write it: " << m.err;
    if (kind >= 10 && fs::exists(repro / "repro.py")) expectInertRepro(repro, file.string());
  }
  for (int kind : {0, 2, 3}) EXPECT_EQ(refused[kind], kEach) << "every mutation of kind " << kind << " is unreadable";
  EXPECT_EQ(refused[10], 0) << "line breaks in the call and versions are no reason to refuse a capture";
  // Not files at all.
  fs::path fifo = dir / "fifo.safetensors", folder = dir / "folder.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  fs::create_directory(folder);
  for (const fs::path& odd : {fifo, folder}) {
    Measured m = measure({"replay", odd.string()}, dir / "stderr.txt");
    expectAnswered(m, odd.string());
    EXPECT_EQ(m.code, 3) << m.err;
  }
}

// One damage to a copy of the run: `sql` statements on its store, bytes on disk, or odd files.
void damageRun(const fs::path& dir, int kind, std::mt19937& rng) {
  fs::path store = dir / "rank-0.sqlite";
  auto sql = [&](const std::string& statement) {
    sh(python() +
       " -c \"import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); "
       "c.commit()\" '" +
       store.string() + "' \"" + statement + "\" >/dev/null 2>&1");
  };
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  switch (kind) {
    case 0: fs::resize_file(store, pick(fs::file_size(store))); break;
    case 1: {
      std::string bytes = slurp(store);
      for (int i = 1 + static_cast<int>(pick(64)); i > 0; --i) bytes[pick(bytes.size())] = static_cast<char>(rng());
      spit(store, bytes);
      break;
    }
    case 2: {
      const char* values[] = {"abc", "99999999999", "-3", "", "1e3"};
      const char* keys[] = {"rank", "schema_version", "host_syncs", "unprobed:x", "step_unit"};
      sql(std::string("UPDATE meta SET value='") + values[pick(5)] + "' WHERE key='" + keys[pick(5)] + "'");
      break;
    }
    case 3: {
      const char* columns[] = {"signatures.module", "signatures.op", "signatures.tensors", "calls.phase",
                               "tensors.role",      "tensors.dtype", "tensors.shape",      "kernels.name"};
      std::string c = columns[pick(8)];
      sql("UPDATE " + c.substr(0, c.find('.')) + " SET " + c.substr(c.find('.') + 1) + "=CAST(x'fffe41c3' AS TEXT)");
      break;
    }
    case 4: {
      const char* columns[] = {"calls.step",   "calls.layer",   "calls.seq",        "calls.sig",  "calls.max_abs",
                               "calls.health", "tensors.numel", "kernels.start_ns", "tensors.seq"};
      std::string c = columns[pick(9)];
      sql("UPDATE " + c.substr(0, c.find('.')) + " SET " + c.substr(c.find('.') + 1) + "='x9'");
      break;
    }
    case 5: {
      const char* tables[] = {"kernels", "tensors", "captures", "steps", "sentinel", "calls", "meta", "signatures"};
      sql(std::string("DROP TABLE ") + tables[pick(8)]);
      break;
    }
    case 6: {
      const char* paths[] = {"/etc/passwd", "../../../../etc/shadow", "captures", "nonexistent.safetensors", ""};
      sql(std::string("UPDATE captures SET path='") + paths[pick(5)] + "'");
      break;
    }
    case 7:
      if (rng() % 2) mkfifo((dir / "rank-1.sqlite").c_str(), 0644);
      else fs::create_directory(dir / "rank-1.sqlite");
      break;
    case 8: {
      std::string bytes = slurp(dir / "run.json");
      spit(dir / "run.json", rng() % 2 ? bytes.substr(0, pick(bytes.size())) : "[1, \"\xff\"]");
      break;
    }
    case 9: spit(store, ""); break;
    case 10: {  // tallies with absurd values, for a rank with a store and one without
      const uint64_t values[] = {0x2156'4f52'504e'414e /* "NANPROV!" */, INT64_MAX, uint64_t{1} << 63, 0, 1};
      spit(dir / "rank-0.tally", littleEndian(values[pick(std::size(values))]));
      spit(dir / "rank-1.tally", littleEndian(values[pick(std::size(values))]));
      break;
    }
    case 11:  // call rows deleted under the writer's count
      sql(rng() % 2 ? "DELETE FROM calls" : "DELETE FROM calls WHERE seq % 2 = 0");
      break;
    default: {  // direction overrides and line separators in every text column
      sql("UPDATE signatures SET module=module||CAST(x'e280aee280a8' AS TEXT), op=op||CAST(x'e280ae' AS TEXT); "
          "UPDATE kernels SET name=name||CAST(x'e280a9' AS TEXT)");
      break;
    }
  }
}

TEST_F(Fuzz, HundredMutatedRunsGetAnAnswerFromEveryReader) {
  std::mt19937 rng(5678);
  const std::string page = (runDir("fuzz-page") / "page.html").string();
  const std::string trace = (runDir("fuzz-trace") / "trace.json").string();
  fs::create_directories(fs::path(page).parent_path());
  fs::create_directories(fs::path(trace).parent_path());
  const std::vector<std::vector<std::string>> readers = {{"report"},
                                                         {"report", "--json"},
                                                         {"report", "--html", page},
                                                         {"calls", "--json"},
                                                         {"kernels", "--json"},
                                                         {"trace", "--out", trace},
                                                         {"sql", "SELECT * FROM calls"},
                                                         {"replay"}};
  fs::path err = runDir("fuzz-stderr");
  for (int i = 0; i < 104; ++i) {
    fs::path dir = runDir("fuzz-run");
    fs::copy(run_->dir, dir, fs::copy_options::recursive);
    int kind = i % 13;
    damageRun(dir, kind, rng);
    for (std::vector<std::string> args : readers) {
      args.insert(args.begin() + 1, dir.string());
      Measured m = measure(args, err);
      expectAnswered(m, "damage " + std::to_string(kind) + " (run " + std::to_string(i) + "), " + args[0]);
    }
    fs::remove_all(dir);
  }
  fs::remove(err);
}

}  // namespace
