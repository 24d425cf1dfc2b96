// Text kept for the life of the process, one copy per distinct string: a name the training
// thread hands around as a pointer (a module path, why a call's kernels are unknown), compared by
// pointer, copied without allocating. Interning allocates only the first time a string is seen.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>

namespace nanprov {

// The one empty text: an inline variable has one address in the whole program, so every empty
// InternedText compares equal to every other.
inline constexpr char kEmptyText[] = "";

// The one copy of `text` (kEmptyText when it is empty). Past `limit` distinct strings in one table the rest intern as
// `overflow`: a store written by something else must not grow the table without bound.
const char* internText(std::string_view text);

// The one copy of a text, held as its pointer: copied, compared and hashed as one. Making one
// from a string interns it (a lock, and an allocation the first time).
class InternedText {
 public:
  InternedText() = default;
  InternedText(std::string_view text) : text_(internText(text)) {}  // NOLINT: implicit, like a string
  InternedText(const std::string& text) : InternedText(std::string_view(text)) {}
  InternedText(const char* text) : InternedText(std::string_view(text)) {}

  const char* c_str() const { return text_; }
  std::string str() const { return text_; }
  std::string_view view() const { return text_; }
  bool empty() const { return *text_ == '\0'; }
  bool operator==(const InternedText& other) const { return text_ == other.text_; }
  bool operator==(std::string_view other) const { return other == text_; }
  bool operator==(const char* other) const { return std::string_view(other) == text_; }
  bool operator==(const std::string& other) const { return other == text_; }
  friend std::ostream& operator<<(std::ostream& out, const InternedText& t) { return out << t.text_; }

 private:
  const char* text_ = kEmptyText;
};

// A separate table for dtype names (a handful), bounded more tightly.
const char* internDtypeName(std::string_view name);

}  // namespace nanprov
