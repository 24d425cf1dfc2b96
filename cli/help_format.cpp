#include "cli/help_format.h"

namespace nanprov::cli {
namespace {

std::string names(const std::set<CLI::Option*>& options) {
  std::string out;
  for (const CLI::Option* o : options) out += (out.empty() ? "" : ", ") + o->get_name();
  return out;
}

}  // namespace

std::string HelpFormat::make_option_opts(const CLI::Option* opt) const {
  // CLI11's text without its Needs/Excludes, which it writes last: cut them off and say them in words.
  std::string out = CLI::Formatter::make_option_opts(opt);
  for (const char* label : {" Needs:", " Excludes:"}) {
    if (size_t at = out.find(label); at != std::string::npos) out.erase(at);
  }
  if (!opt->get_needs().empty()) out += "  (with " + names(opt->get_needs()) + ")";
  if (!opt->get_excludes().empty()) out += "  (not with " + names(opt->get_excludes()) + ")";
  return out;
}

std::string HelpFormat::make_usage(const CLI::App* app, std::string name) const {
  std::string usage = CLI::Formatter::make_usage(app, std::move(name));
  if (app->get_name() != "run") return usage;
  const size_t end = usage.find_last_not_of('\n') + 1;
  return usage.insert(end, " -- CMD [ARGS...]");
}

}  // namespace nanprov::cli
