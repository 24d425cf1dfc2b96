// The script `replay --emit-repro` writes holds capture metadata, and a capture may come from
// anyone: no value, whatever bytes it holds, may become code. Python itself parses each script here.
#include "replay/repro_script.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {
namespace fs = std::filesystem;
using nanprov::replay::reproScript;
using nanprov::replay::ReproSpec;

// Runs the Python `code` on `script` with the test's Python (isolated: nothing from here is
// imported); its stdout, and the exit code in `code_out`.
std::string python(const std::string& code, const fs::path& script, int* code_out) {
  const fs::path checker = script.string() + ".check.py";
  std::ofstream(checker) << code;
  std::string cmd = std::string(NANPROV_PYTHON) + " -I '" + checker.string() + "' '" + script.string() + "' 2>&1";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  char buf[4096];
  while (pipe && fgets(buf, sizeof buf, pipe)) out += buf;
  *code_out = pipe ? WEXITSTATUS(pclose(pipe)) : -1;
  fs::remove(checker);
  return out;
}

// What the script's top level does, statement by statement, as Python parses it: any statement a
// metadata value smuggled in shows up here; CALL's value as Python reads it, last.
const char* kTopLevel =
    "import ast, sys\n"
    "tree = ast.parse(open(sys.argv[1], \"rb\").read())\n"
    "for node in tree.body:\n"
    "    if isinstance(node, ast.Assign): print(\"assign\", node.targets[0].id)\n"
    "    elif isinstance(node, (ast.Import, ast.ImportFrom)): print(\"import\", *[a.name for a in node.names])\n"
    "    elif isinstance(node, ast.FunctionDef): print(\"def\", node.name)\n"
    "    elif isinstance(node, ast.If) and ast.unparse(node.test) == \"__name__ == '__main__'\": print(\"main "
    "guard\")\n"
    "    else: print(\"other\", type(node).__name__)\n"
    "call = [n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == \"CALL\"][0]\n"
    "print(\"CALL\", ascii(ast.literal_eval(call.value)))\n";

class ReproScript : public testing::TestWithParam<std::string> {};

TEST_P(ReproScript, MetadataWithLineBreaksStaysInertInCommentsAndLiterals) {
  const std::string payload = "import pathlib; pathlib.Path(\"MARK\").write_text(\"x\")";
  const std::string hostile = "rank0:layer0:call6" + GetParam() + payload + GetParam() + "#";
  ReproSpec spec;
  spec.call = hostile;
  spec.finding = "root cause precision-limit: " + hostile;
  spec.versions = "torch " + hostile + ", CUDA runtime " + hostile + ", cuDNN " + hostile + ", " + hostile;
  spec.backend = "cudnn";
  spec.device = "cuda";
  const std::string script = reproScript(spec);
  fs::path file = fs::temp_directory_path() / ("nanprov-repro-test-" + std::to_string(::getpid()) + ".py");
  std::ofstream(file, std::ios::binary) << script;

  // Every byte is printable ASCII or a line break nanprov wrote: no \r, NUL or U+2028 left.
  for (char c : script) {
    const auto u = static_cast<unsigned char>(c);
    EXPECT_TRUE(c == '\n' || (u >= 0x20 && u < 0x7f)) << "byte " << int(u) << " in the script";
  }
  int code = 0;
  std::string parsed = python(kTopLevel, file, &code);
  fs::remove(file);
  ASSERT_EQ(code, 0) << parsed;
  const std::string statements = parsed.substr(0, parsed.find("CALL '"));
  EXPECT_EQ(statements.find("pathlib"), std::string::npos) << "the payload became a statement:\n" << parsed;
  EXPECT_EQ(statements.find("other"), std::string::npos) << parsed;
  // The literal reads back as the metadata, byte for byte (as Python's ascii() writes it).
  std::string escaped_break = GetParam() == "\n"             ? "\\n"
                              : GetParam() == "\r"           ? "\\r"
                              : GetParam() == "\r\n"         ? "\\r\\n"
                              : GetParam() == "\xe2\x80\xa8" ? "\\u2028"
                                                             : "\\x00";
  EXPECT_NE(parsed.find("CALL 'rank0:layer0:call6" + escaped_break + "import pathlib; pathlib.Path(\"MARK\")"),
            std::string::npos)
      << parsed;
}

INSTANTIATE_TEST_SUITE_P(LineBreaks, ReproScript,
                         testing::Values(std::string("\n"), std::string("\r"), std::string("\r\n"),
                                         std::string("\xe2\x80\xa8"), std::string(1, '\0')));

TEST(ReproScriptText, InvalidUtf8AndAstralCharactersAreEscapedNotDropped) {
  ReproSpec spec;
  spec.call = std::string("layers.\xff\xc3.attn \xf0\x9f\x98\x80 caf\xc3\xa9");
  spec.backend = "math";
  spec.device = "cpu";
  const std::string script = reproScript(spec);
  EXPECT_NE(script.find("CALL = \"layers.\\ufffd\\ufffd.attn \\U0001f600 caf\\xe9\""), std::string::npos) << script;
}

}  // namespace
