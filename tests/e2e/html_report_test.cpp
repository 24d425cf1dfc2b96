// End-to-end: `nanprov report --html` on real CPU training runs, the page rendered in headless
// Chromium and judged from the DOM it builds: the verdict names the edge, and each rank's layer ×
// step picture has exactly one cell per (layer, step, phase) its calls had, coloured as the calls
// say. A screenshot of each page is kept in its run directory. Without a browser those tests skip
// (scripts/setup installs Debian's chromium, as CI does); the page's own promises (nothing
// fetched, every stored text escaped) are checked without one.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <tuple>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

// The browser on PATH, or "" when there is none.
const std::string& chromium() {
  static const std::string found = [] {
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
      Result r = sh(std::string("command -v ") + name + " 2>/dev/null");
      if (r.code == 0 && !r.out.empty()) return r.out.substr(0, r.out.find('\n'));
    }
    return std::string();
  }();
  return found;
}

#define REQUIRE_CHROMIUM() \
  if (chromium().empty())  \
  GTEST_SKIP() << "no chromium on PATH: scripts/setup installs Debian's chromium (CI runs these)"

// Headless, as root in CI containers (hence --no-sandbox), with a profile of its own so that tests
// running at once do not share one.
std::string browser(const fs::path& dir) {
  return "timeout 120 " + chromium() +
         " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
         "--user-data-dir=" +
         (dir / "chromium-profile").string() + " ";
}

struct Page {
  Result written;  // `nanprov report RUN --html FILE`
  fs::path html, png;
  std::string dom;  // as Chromium built it
};

Page writeAndRender(const fs::path& dir) {
  Page page;
  page.html = dir / "report.html";
  page.png = dir / "report.png";
  page.written = sh(nanprov() + " report " + dir.string() + " --html " + page.html.string());
  page.dom = sh(browser(dir) + "--dump-dom file://" + page.html.string() + " 2>/dev/null").out;
  sh(browser(dir) + "--screenshot=" + page.png.string() + " --window-size=1280,1600 file://" + page.html.string() +
     " >/dev/null 2>&1");
  return page;
}

bool isPng(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  return in && std::string(magic, 8) == "\x89PNG\r\n\x1a\n" && fs::file_size(file) > 1000;
}

// One picture cell, by its data-* attributes.
struct Cell {
  int rank = 0;
  int64_t layer = 0, step = 0;
  std::string phase, health;
  bool first_edge = false;
};

// The cells of the rendered page. Their data-* attributes come before the title, whose tooltip
// text is the only part a stored name can reach.
std::vector<Cell> cellsOf(const std::string& dom) {
  std::vector<Cell> cells;
  static const std::regex cell_re(
      "<td class=\"cell[^\"]*\"[^>]*?data-rank=\"(\\d+)\" data-layer=\"(-?\\d+)\" data-step=\"(\\d+)\""
      "[^>]*?data-phase=\"(fwd|bwd)\" data-health=\"([a-z-]+)\"");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), cell_re); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    std::string tag = m.str(0);
    cells.push_back({.rank = std::stoi(m.str(1)),
                     .layer = std::stoll(m.str(2)),
                     .step = std::stoll(m.str(3)),
                     .phase = m.str(4),
                     .health = m.str(5),
                     .first_edge = tag.find("id=\"first-edge-cell\"") != std::string::npos});
  }
  return cells;
}

using CellKey = std::tuple<int, int64_t, int64_t, std::string>;  // rank, layer, step, phase

// (rank, layer, step, phase) of every call of the run, from `nanprov calls --json`.
std::set<CellKey> callKeys(const fs::path& dir) {
  std::set<CellKey> keys;
  for (const json& c : commandJson("calls", dir)) {
    keys.insert(
        {c["rank"].get<int>(), c["layer"].get<int64_t>(), c["step"].get<int64_t>(), c["phase"].get<std::string>()});
  }
  return keys;
}

// Exactly one cell per (layer, step, phase) of each rank, and none for anything else: in these
// runs every layer runs at every step, so the picture is the calls' own grid.
void expectOneCellPerLayerStepAndPhase(const std::vector<Cell>& cells, const fs::path& dir) {
  std::map<CellKey, int> seen;
  for (const Cell& c : cells) ++seen[{c.rank, c.layer, c.step, c.phase}];
  for (const auto& [key, n] : seen) EXPECT_EQ(n, 1) << "rank " << std::get<0>(key) << " layer " << std::get<1>(key);
  std::set<CellKey> drawn;
  for (const auto& [key, n] : seen) drawn.insert(key);
  EXPECT_EQ(drawn, callKeys(dir));
}

std::string elementText(const std::string& dom, const std::string& id) {
  size_t at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  size_t begin = dom.find('>', at) + 1;
  return dom.substr(begin, dom.find('<', begin) - begin);
}

// The first edge's cell: exactly one, where the JSON report puts the edge, in the colour given.
void expectFirstEdgeCell(const std::vector<Cell>& cells, const json& edge, const std::string& health) {
  std::vector<Cell> marked;
  for (const Cell& c : cells) {
    if (c.first_edge) marked.push_back(c);
  }
  ASSERT_EQ(marked.size(), 1u);
  EXPECT_EQ(marked[0].rank, edge["rank"].get<int>());
  EXPECT_EQ(marked[0].layer, edge["layer"].get<int64_t>());
  EXPECT_EQ(marked[0].step, edge["step"].get<int64_t>());
  EXPECT_EQ(marked[0].phase, edge["phase"].get<std::string>());
  EXPECT_EQ(marked[0].health, health);
}

std::map<std::string, int> healthCounts(const std::vector<Cell>& cells) {
  std::map<std::string, int> n;
  for (const Cell& c : cells) ++n[c.health];
  return n;
}

TEST(Html, CleanRunPageSaysCleanAndEveryCellIsClean) {
  REQUIRE_CHROMIUM();
  TrainedRun r = train("html-clean", "", "--steps 3 --mask");
  ASSERT_EQ(r.report.code, 0) << r.train.out;
  Page page = writeAndRender(r.dir);
  EXPECT_EQ(page.written.code, 0) << "the exit status is report's own: " << page.written.out;
  EXPECT_EQ(page.written.out.rfind("clean: ", 0), 0u) << "the text report still goes to stdout: " << page.written.out;
  EXPECT_NE(page.dom.find("data-outcome=\"clean\""), std::string::npos) << page.dom.substr(0, 2000);
  EXPECT_EQ(elementText(page.dom, "headline").rfind("clean: every checked attention input and output was finite", 0),
            0u);
  std::vector<Cell> cells = cellsOf(page.dom);
  EXPECT_EQ(cells.size(), 2u * 3u * 2u) << "2 layers x 3 steps x (fwd, bwd)";
  expectOneCellPerLayerStepAndPhase(cells, r.dir);
  EXPECT_EQ(healthCounts(cells), (std::map<std::string, int>{{"clean", 12}}));
  EXPECT_EQ(page.dom.find("id=\"first-edge-cell\""), std::string::npos);
  EXPECT_NE(page.dom.find("No edge, so nothing to replay."), std::string::npos);
  EXPECT_TRUE(isPng(page.png)) << page.png;
}

// A real overflow inside attention (no injection): the verdict and the edge box name the edge, its
// cell is a source edge and what followed it is propagated. With the capture's replay kept next to
// it, the page shows every backend's verdicts.
TEST(Html, EdgeRunPageNamesTheEdgeMarksItsCellAndShowsTheReplay) {
  REQUIRE_CHROMIUM();
  TrainedRun r = train("html-edge", "", "--steps 4 --glitch-step 2 --glitch-scale 1e20");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const json& edge = r.doc["first_edge"];
  ASSERT_EQ(edge["name"], "rank0:layer0:call4") << r.report.out;
  Page before = writeAndRender(r.dir);
  EXPECT_EQ(before.written.code, 1) << before.written.out;
  EXPECT_NE(before.dom.find("The run holds no replay of its capture"), std::string::npos);
  EXPECT_EQ(before.dom.find("id=\"replay-matrix\""), std::string::npos) << "no matrix is made up";

  const std::string capture = edge["capture"].get<std::string>();
  const std::string kept = capture.substr(0, capture.size() - std::string(".safetensors").size()) + ".replay.json";
  EXPECT_NE(before.dom.find(kept), std::string::npos) << "the page says where the replay is kept";
  EXPECT_NE(before.dom.find("nanprov replay " + capture + " --keep"), std::string::npos)
      << "and the line that keeps it";
  Result replay = sh(nanprov() + " replay " + capture + " --keep");
  ASSERT_EQ(replay.code, 1) << "the overflow recurs: " << replay.out;

  Page page = writeAndRender(r.dir);
  EXPECT_EQ(page.written.code, 1) << page.written.out;
  EXPECT_NE(elementText(page.dom, "headline").find("rank0:layer0:call4  first non-finite edge"), std::string::npos)
      << elementText(page.dom, "headline");
  EXPECT_NE(page.dom.find("<section id=\"first-edge\" data-name=\"rank0:layer0:call4\">"), std::string::npos);
  EXPECT_EQ(elementText(page.dom, "edge-name"), "rank0:layer0:call4");
  std::vector<Cell> cells = cellsOf(page.dom);
  EXPECT_EQ(cells.size(), 2u * 4u * 2u);
  expectOneCellPerLayerStepAndPhase(cells, r.dir);
  expectFirstEdgeCell(cells, edge, "source-edge");
  for (const Cell& c : cells) {
    if (c.step < 2) EXPECT_EQ(c.health, "clean") << "layer " << c.layer << " step " << c.step << " " << c.phase;
    if (c.step == 3) EXPECT_EQ(c.health, "propagated") << "layer " << c.layer << " " << c.phase;
  }
  // The verdict matrix: the run's own outputs and each CPU backend, O and LSE.
  EXPECT_NE(page.dom.find("id=\"replay-matrix\""), std::string::npos);
  EXPECT_NE(page.dom.find("<tr data-backend=\"captured\">"), std::string::npos);
  EXPECT_NE(page.dom.find("<tr data-backend=\"math\">"), std::string::npos);
  EXPECT_NE(page.dom.find("precision-limit"), std::string::npos) << "the root cause replay gave";
  EXPECT_NE(page.dom.find("aten::_scaled_dot_product_flash_attention_for_cpu"), std::string::npos)
      << "the edge's kernel";
  EXPECT_TRUE(isPng(page.png)) << page.png;
}

// A store whose calls name 20,000 layers (a deep model, or a damaged store) draws bands of layers,
// as a long run draws bands of steps: the page stays small, every layer is still in a row, and the
// first edge's cell is still marked.
TEST(Html, ADeepModelsPictureHoldsBandsOfLayers) {
  TrainedRun r = train("html-deep", "", "--steps 2 --glitch-step 1");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  Result deepened = addCallCopies(r.dir / "rank-0.sqlite", 20'000, "new[col('layer')] = 100 + i");
  ASSERT_EQ(deepened.code, 0) << deepened.out;
  const fs::path page = r.dir / "deep.html";
  const std::string timed =
      fs::exists("/usr/bin/time") ? "/usr/bin/time -f 'rss %M' " : "";  // its peak memory, where it can
  Result written =
      sh(timed + nanprov() + " report " + r.dir.string() + " --html " + page.string() + " 2>&1 >/dev/null");
  EXPECT_EQ(written.code, 1) << written.out;
  const std::string html = sh("cat " + page.string()).out;
  EXPECT_LT(html.size(), 8u << 20) << "a page of " << html.size() << " bytes";
  EXPECT_NE(html.find("This model is deep: each row holds up to"), std::string::npos);
  size_t rows = 0;
  for (size_t at = html.find("<tr><th title="); at != std::string::npos; at = html.find("<tr><th title=", at + 1))
    ++rows;
  EXPECT_LE(rows, 2u * 256u) << "at most 256 rows per phase table";
  EXPECT_GT(rows, 0u);
  EXPECT_NE(html.find("data-layer-last="), std::string::npos) << "rows hold bands of layers";
  EXPECT_NE(html.find("id=\"first-edge-cell\""), std::string::npos) << "the first edge is still marked";
  if (size_t at = written.out.find("rss "); at != std::string::npos) {
    EXPECT_LT(std::stol(written.out.substr(at + 4)), 512 * 1024) << written.out;
  }
}

TEST(Html, TwoRankRunHasAPictureForEachRank) {
  REQUIRE_CHROMIUM();
  fs::path dir = runDir("html-ddp");
  std::string torchrun = fs::path(python()).parent_path().string() + "/torchrun";
  // Loopback only: CI sandboxes have no other interface gloo could use.
  Result t = sh("GLOO_SOCKET_IFNAME=lo " + nanprov() + " run --out " + dir.string() +
                " --inject 'rank=1,layer=0,phase=bwd,tensor=dK,step=1' -- " + torchrun +
                " --standalone --nproc-per-node=2 " + example("tiny_transformer.py") + " --steps 3 --ddp 2>&1");
  ASSERT_EQ(t.code, 1) << t.out;
  json doc = commandJson("report", dir);
  ASSERT_EQ(doc["first_edge"]["name"], "rank1:layer0:call3") << doc.dump(1);
  Page page = writeAndRender(dir);
  EXPECT_EQ(page.written.code, 1) << page.written.out;
  EXPECT_NE(elementText(page.dom, "headline").find("rank1:layer0:call3"), std::string::npos)
      << elementText(page.dom, "headline");
  std::vector<Cell> cells = cellsOf(page.dom);
  EXPECT_EQ(cells.size(), 2u * (2u * 3u * 2u)) << "2 ranks x 2 layers x 3 steps x (fwd, bwd)";
  expectOneCellPerLayerStepAndPhase(cells, dir);
  expectFirstEdgeCell(cells, doc["first_edge"], "injected");
  for (int rank : {0, 1}) {
    EXPECT_NE(page.dom.find("<table class=\"picture\" data-rank=\"" + std::to_string(rank) + "\" data-phase=\"bwd\""),
              std::string::npos)
        << "rank " << rank;
  }
  EXPECT_TRUE(isPng(page.png)) << page.png;
}

// Layer 1's forward output is scaled at step 0 (injected) and its backward computes from it: the
// audit finds both, and the backward, which nothing injected, is drawn as an audit finding.
TEST(Html, AuditRunListsFindingsAndDrawsThem) {
  REQUIRE_CHROMIUM();
  TrainedRun r = train("html-audit", "--audit --inject 'layer=1,tensor=O,value=scale:3,step=0'", "--steps 2");
  ASSERT_EQ(r.report.code, 5) << r.report.out;
  Page page = writeAndRender(r.dir);
  EXPECT_EQ(page.written.code, 5) << page.written.out;
  EXPECT_NE(page.dom.find("data-outcome=\"audit_finding\""), std::string::npos);
  for (const char* name : {"rank0:layer1:call0", "rank0:layer1:call1"}) {
    EXPECT_NE(page.dom.find(std::string("<tr class=\"finding\" data-name=\"") + name + "\">"), std::string::npos)
        << name;
  }
  std::vector<Cell> cells = cellsOf(page.dom);
  EXPECT_EQ(cells.size(), 2u * 2u * 2u);
  expectOneCellPerLayerStepAndPhase(cells, r.dir);
  for (const Cell& c : cells) {
    std::string want = c.layer == 1 && c.step == 0 ? (c.phase == "fwd" ? "injected" : "audit-finding") : "clean";
    EXPECT_EQ(c.health, want) << "layer " << c.layer << " step " << c.step << " " << c.phase;
  }
  EXPECT_TRUE(isPng(page.png)) << page.png;
}

// No browser needed: the page fetches nothing, and a module name is any ModuleDict key, so one
// holding markup must come out as text. A browser, where there is one, must build no element of
// it either.
TEST(Html, PageFetchesNothingAndEscapesStoredTexts) {
  TrainedRun r = train("html-hostile", "", "--steps 2 --glitch-step 1");
  ASSERT_EQ(r.report.code, 1) << r.train.out;
  const std::string hostile = "layers.0<script>alert(1)</script><img src=x onerror=alert(2)>\"'&";
  Result set =
      sh(python() +
         " -c \"import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('UPDATE signatures SET "
         "module=?', (sys.argv[2],)); c.commit()\" '" +
         (r.dir / "rank-0.sqlite").string() + "' '" + std::regex_replace(hostile, std::regex("'"), "'\\''") + "' 2>&1");
  ASSERT_EQ(set.code, 0) << set.out;
  fs::path html = r.dir / "report.html";
  Result written = sh(nanprov() + " report " + r.dir.string() + " --html " + html.string() + " 2>&1");
  EXPECT_EQ(written.code, 1) << written.out;
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(page.empty());

  // Every tag of the page is nanprov's own (stored text cannot open one); none names the network.
  static const std::regex tag_re("<[^>]*>");
  for (auto it = std::sregex_iterator(page.begin(), page.end(), tag_re); it != std::sregex_iterator(); ++it) {
    const std::string tag = it->str();
    EXPECT_EQ(tag.find("http:"), std::string::npos) << tag;
    EXPECT_EQ(tag.find("https:"), std::string::npos) << tag;
    EXPECT_EQ(tag.find("//"), std::string::npos) << tag;
    EXPECT_NE(tag.rfind("<script", 0), 0u) << tag;
    EXPECT_NE(tag.rfind("<img", 0), 0u) << tag;
    EXPECT_NE(tag.rfind("<link", 0), 0u) << tag;
  }
  EXPECT_EQ(page.find("@import"), std::string::npos);
  EXPECT_EQ(page.find("url("), std::string::npos);
  EXPECT_NE(page.find("content=\"default-src 'none'; style-src 'unsafe-inline'\""), std::string::npos)
      << "the CSP forbids fetches and scripts";
  EXPECT_NE(
      page.find("layers.0&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;&quot;&#39;&amp;"),
      std::string::npos)
      << "the module name is shown as text";

  if (chromium().empty()) return;
  const std::string dom = sh(browser(r.dir) + "--dump-dom file://" + html.string() + " 2>/dev/null").out;
  ASSERT_NE(dom.find("id=\"headline\""), std::string::npos) << dom.substr(0, 2000);
  EXPECT_EQ(dom.find("<script"), std::string::npos);
  EXPECT_EQ(dom.find("<img"), std::string::npos);
  EXPECT_NE(dom.find("layers.0&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
}

TEST(Html, UnwritablePageIsOneLineAndExitThree) {
  TrainedRun r = train("html-unwritable", "", "--steps 1");
  ASSERT_EQ(r.report.code, 0) << r.train.out;
  for (const std::string& target : {(r.dir / "no-such-dir" / "report.html").string(), r.dir.string()}) {
    Result w = sh(nanprov() + " report " + r.dir.string() + " --html " + target + " 2>&1 >/dev/null");
    EXPECT_EQ(w.code, 3) << target << ": " << w.out;
    EXPECT_EQ(std::count(w.out.begin(), w.out.end(), '\n'), 1) << w.out;
    EXPECT_NE(w.out.find("nanprov report: cannot"), std::string::npos) << w.out;
    EXPECT_NE(w.out.find(target), std::string::npos) << w.out;
  }
}

}  // namespace
