// End-to-end: layers are numbered by the block that holds the attention, whatever holds the blocks
// and whoever calls them (tests/e2e/scripts/loop_driven_blocks.py): the model's forward, the
// training loop calling a GPT's blocks one by one (as litgpt users do), a bare nn.ModuleList beside
// a separate stem and head (timm-style), a plain Python list, a plain list attribute. Each block's
// attention keeps its full path and its layer, the report counts the real layers, and the
// gradient sentinel names every parameter apart, all as the script's plain-PyTorch hooks say.
#include <gtest/gtest.h>

#include <set>

#include "tests/e2e/e2e_support.h"

namespace {
using namespace e2e;

const std::string kScript = std::string(NANPROV_TEST_SCRIPTS) + "/loop_driven_blocks.py";

struct Holder {
  std::string name;
  std::string block_prefix;  // the blocks' path, e.g. "transformer.h": block i is "<prefix>.<i>"
};

const std::vector<Holder> kHolders = {
    {"forward", "transformer.h"}, {"loop", "transformer.h"}, {"modulelist", "blocks"},
    {"list", "blocks"},           {"list-attr", "blocks"},
};

// The oracle's line `oracle: <what>: <value>`.
std::string oracleSays(const std::string& out, const std::string& what) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("oracle: " + what + ": ([^\\n]*)"))) return "";
  return m[1].str();
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

TEST(LoopDrivenBlocks, EveryBlockKeepsItsLayerAndFullPath) {
  constexpr int kLayers = 4, kGlitchLayer = 2;
  for (const Holder& h : kHolders) {
    SCOPED_TRACE(h.name);
    TrainedRun r =
        train("blocks-" + h.name, "", "--holder " + h.name + " --glitch-step 2 --glitch-layer 2 --oracle", kScript);
    ASSERT_EQ(r.report.code, 1) << r.train.out << r.report.out;
    const json& e = r.doc["first_edge"];
    const std::string glitched = h.block_prefix + "." + std::to_string(kGlitchLayer) + ".attn";
    ASSERT_NE(oracleSays(r.train.out, "first non-finite forward output"), "") << r.train.out;
    EXPECT_EQ(oracleSays(r.train.out, "first non-finite forward output"), glitched + " at step 2");
    expectFields(
        e, {{"module", glitched}, {"layer", kGlitchLayer}, {"step", 2}, {"phase", "fwd"}, {"origin", "attention"}});
    EXPECT_EQ(r.doc["outcome"], "edge") << r.report.out;

    // "after it: N non-finite calls across M layers": the layers the oracle saw non-finite values in.
    EXPECT_EQ(r.doc["propagation"]["layers"], std::stoi(oracleSays(r.train.out, "non-finite attention layers")))
        << r.report.out;
    Result text = sh(nanprov() + " report " + r.dir.string());
    EXPECT_NE(text.out.find("across " + std::to_string(kLayers) + " layers"), std::string::npos) << text.out;

    // Every block's attention, at every step: its own full path, its own layer.
    json calls = commandJson("calls", r.dir, "--phase fwd");
    ASSERT_TRUE(calls.is_array()) << calls.dump();
    std::set<std::pair<std::string, int>> seen;
    for (const json& c : calls) seen.insert({c["module"].get<std::string>(), c["layer"].get<int>()});
    std::set<std::pair<std::string, int>> want;
    for (int i = 0; i < kLayers; ++i) want.insert({h.block_prefix + "." + std::to_string(i) + ".attn", i});
    EXPECT_EQ(seen, want);

    // The gradient sentinel names the parameters as the script does, no two alike.
    const json& s = r.doc["gradient_sentinel"];
    ASSERT_TRUE(s.is_object()) << r.report.out;
    EXPECT_EQ(s["step"], 2);
    std::vector<std::string> named = strings(s["gradients"]);
    std::vector<std::string> oracle = split(oracleSays(r.train.out, "non-finite gradients at step 2"));
    ASSERT_FALSE(oracle.empty()) << r.train.out;
    EXPECT_EQ(std::set<std::string>(named.begin(), named.end()).size(), named.size()) << s.dump();
    EXPECT_EQ(std::set<std::string>(named.begin(), named.end()), std::set<std::string>(oracle.begin(), oracle.end()));
  }
}

}  // namespace
