// What a store holds, made safe to print: module names (legal ModuleDict keys), ops, backends,
// kernel names, notes and meta come from outside nanprov, and a newline or a terminal escape in
// one of them would forge report lines or rewrite the screen. Text renderers print these copies;
// JSON keeps the values as stored (its encoder escapes them).
#pragma once

#include "base/records/call_record.h"
#include "report/audit_findings.h"
#include "report/layer_trends.h"
#include "report/report.h"

namespace nanprov::report {

CallRecord forTerminal(CallRecord call);
Trends forTerminal(Trends trends);
AuditSummary forTerminal(AuditSummary audit);
// Every text of the report that came from a store, a capture's file or run.json.
Report forTerminal(Report report);

}  // namespace nanprov::report
