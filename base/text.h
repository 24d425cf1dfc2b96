// Small text helpers shared by the CLI and the replay engine.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace nanprov {

// The first line of a message: c10 and other libraries append stack traces after a newline, and
// nanprov prints one line per error.
inline std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// "a, b, c": the parts with `sep` between them.
inline std::string joined(const std::vector<std::string>& parts, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// "a,b,,c" split on `sep`, empty parts dropped.
inline std::vector<std::string> splitList(std::string_view text, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(sep, begin);
    if (end == std::string_view::npos) end = text.size();
    if (end > begin) parts.emplace_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

// A figure for people: three significant digits ("0.000353", "1.5e-11", "44.7").
inline std::string shortNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// One word of a shell command, as the user will paste it: unchanged when it holds only characters
// no shell treats specially, else in single quotes (a run directory named "my runs" or "$(x)"
// must reach nanprov as one word and run nothing).
inline std::string shellWord(std::string_view word) {
  bool plain = !word.empty();
  for (char c : word) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      std::string_view("_./:=@%+,-").find(c) != std::string_view::npos;
    plain = plain && safe;
  }
  if (plain) return std::string(word);
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The UTF-8 format characters that change how a line reads without being control characters:
// the bidirectional overrides, embeddings, isolates and marks (U+202E makes "layers.0.attn" read
// as another name) and the line and paragraph separators U+2028/U+2029 (a line break to some
// terminals, editors and pages). Returns the code point when `text` starts with one, else 0.
inline unsigned formatCharacterAt(std::string_view text) {
  if (text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0xd8 && static_cast<unsigned char>(text[1]) == 0x9c) {
    return 0x061c;  // ARABIC LETTER MARK
  }
  if (text.size() < 3 || static_cast<unsigned char>(text[0]) != 0xe2) return 0;
  const unsigned b1 = static_cast<unsigned char>(text[1]), b2 = static_cast<unsigned char>(text[2]);
  const unsigned cp = 0x2000 | ((b1 & 0x3f) << 6) | (b2 & 0x3f);
  const bool format = cp == 0x200e || cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
  return (b1 & 0xc0) == 0x80 && (b2 & 0xc0) == 0x80 && format ? cp : 0;
}

// `text` safe to print on a terminal: every control character is written as an escape ("\n" as
// \\n, ESC as \\x1b, U+009B as \\u009b), and so is every format character above (U+202E as
// \\u202e), so a module name, capture field or file name holding a newline, a terminal escape or a
// direction override cannot forge report lines, rewrite the screen or read as another name.
// Everything else is kept.
inline std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char buf[8];
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else if (c == 0xc2 && next >= 0x80 && next <= 0x9f) {  // a C1 control (U+0080-U+009F) in UTF-8
      std::snprintf(buf, sizeof buf, "\\u%04x", next);
      out += buf;
      ++i;
    } else if (unsigned cp = formatCharacterAt(text.substr(i))) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
      i += cp == 0x061c ? 1 : 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// "2 s", "0.5 s": a duration for people.
inline std::string shortSeconds(double seconds) { return shortNumber(seconds) + " s"; }

}  // namespace nanprov
