#include "report/terminal_text.h"

#include <gtest/gtest.h>

#include "tests/report/synthetic_report.h"

namespace nanprov::report {
namespace {

// Every text of the model that came from a store, a capture's file or run.json is made printable:
// a newline there cannot forge a line of the text report.
TEST(TerminalText, EveryStoredTextOfTheModelIsMadePrintable) {
  Report r = synthetic::edgeReport();
  const std::string forged = "x\nrank9:layer9:call9  clean";
  const std::string shown = "x\\nrank9:layer9:call9  clean";
  r.first_edge->call.module = forged;
  r.first_edge->kernels.kernels[0].name = forged;
  r.first_edge->kernels.attribution = forged;
  r.first_edge->capture->path = forged;
  r.first_edge->mesh = forged;
  r.conclusion.sentinel->gradients = {forged};
  r.conclusion.collective_paths = {CollectivePath{.op = forged, .parameters = {forged}}};
  r.conclusion.unchecked_by_edge_step = {forged};
  r.conclusion.audit.findings = {AuditFinding{
      .name = forged, .tensors = {TensorJudgement{.role = forged}}, .known_issues = {KnownIssueNote{.title = forged}}}};
  r.run.ranks[0].meta = {{forged, forged}};
  r.run.ranks[0].host = forged;
  r.run.unchecked = {UncheckedAttention{.what = forged, .kind = forged}};
  r.run.command = {forged};
  r.trends.warnings = {TrendWarning{.module = forged}};
  const Report p = forTerminal(r);
  EXPECT_EQ(p.first_edge->call.module, shown);
  EXPECT_EQ(p.first_edge->kernels.kernels[0].name, shown);
  EXPECT_EQ(p.first_edge->kernels.attribution, shown);
  EXPECT_EQ(p.first_edge->capture->path, shown);
  EXPECT_EQ(p.first_edge->mesh, shown);
  EXPECT_EQ(p.conclusion.sentinel->gradients[0], shown);
  EXPECT_EQ(p.conclusion.collective_paths[0].op, shown);
  EXPECT_EQ(p.conclusion.collective_paths[0].parameters[0], shown);
  EXPECT_EQ(p.conclusion.unchecked_by_edge_step[0], shown);
  EXPECT_EQ(p.conclusion.audit.findings[0].name, shown);
  EXPECT_EQ(p.conclusion.audit.findings[0].tensors[0].role, shown);
  EXPECT_EQ(p.conclusion.audit.findings[0].known_issues[0].title, shown);
  EXPECT_EQ(p.run.ranks[0].meta.begin()->first, shown);
  EXPECT_EQ(p.run.ranks[0].meta.begin()->second, shown);
  EXPECT_EQ(p.run.ranks[0].host, shown);
  EXPECT_EQ(p.run.unchecked[0].kind, shown);
  EXPECT_EQ(p.run.command[0], shown);
  EXPECT_EQ(p.trends.warnings[0].module, shown);
  // What is escaped already stays as it is: the text renderers may escape again.
  EXPECT_EQ(forTerminal(p).first_edge->call.module, shown);
}

TEST(TerminalText, ACallsDtypeIsPrintableToo) {
  CallRecord c = synthetic::forward(0, 0, 0, 0);
  c.tensors[0].dtype = DtypeName::intern("Float\x1b[31m");
  c.op = "op\r";
  const CallRecord p = forTerminal(c);
  EXPECT_STREQ(p.tensors[0].dtype.c_str(), "Float\\x1b[31m");
  EXPECT_EQ(p.op, "op\\r");
}

}  // namespace
}  // namespace nanprov::report
