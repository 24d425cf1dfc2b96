#include "base/attention_like.h"

#include <cctype>

namespace nanprov {
namespace {

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool isDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

bool looksLikeAttention(std::string_view path, std::string_view module_class) {
  if (endsWith(module_class, "Attention") || endsWith(module_class, "Attn")) return true;
  std::string_view last = path.substr(path.rfind('.') == std::string_view::npos ? 0 : path.rfind('.') + 1);
  while (!last.empty() && std::isdigit(static_cast<unsigned char>(last.back()))) last.remove_suffix(1);
  for (std::string_view prefix : {"", "self_", "cross_", "self", "cross"}) {
    if (last.substr(0, prefix.size()) != prefix) continue;
    std::string_view rest = last.substr(prefix.size());
    if (rest == "attn" || rest == "attention") return true;
  }
  return false;
}

std::string modulePattern(std::string_view path) {
  std::string out;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find('.', begin);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(begin, end - begin);
    if (begin > 0) out += '.';
    out += isDigits(part) ? std::string_view("*") : part;
    begin = end + 1;
  }
  return out;
}

bool matchesModulePattern(std::string_view pattern, std::string_view path) {
  return modulePattern(path) == pattern || pattern == path;
}

}  // namespace nanprov
