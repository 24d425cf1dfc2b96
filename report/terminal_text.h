// What a store holds, made safe to print: module names (legal ModuleDict keys), ops, backends,
// kernel names, notes and meta come from outside nanprov, and a newline or a terminal escape in
// one of them would forge report lines or rewrite the screen. Text renderers print these copies;
// JSON keeps the values as stored (its encoder escapes them).
#pragma once

#include "report/audit_findings.h"
#include "report/layer_trends.h"
#include "store/reader.h"

namespace nanprov {

CallRecord forTerminal(CallRecord call);
RunData forTerminal(RunData run);
Trends forTerminal(Trends trends);
AuditSummary forTerminal(AuditSummary audit);

}  // namespace nanprov
