// How `--help` reads, for every nanprov command: CLI11's layout, with an option's dependencies said
// in words ("--audit-every N  (with --audit)", where CLI11 prints "N Needs: --audit", which reads
// as one word), and the wrapped command in `nanprov run`'s usage line.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace nanprov::cli {

class HelpFormat : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override;
  // `nanprov run`'s gains " -- CMD [ARGS...]": CLI11 never sees the wrapped command (main() takes
  // everything after "--" first), so it cannot say so itself.
  std::string make_usage(const CLI::App* app, std::string name) const override;
};

}  // namespace nanprov::cli
