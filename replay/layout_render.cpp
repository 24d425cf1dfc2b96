#include "replay/layout_render.h"

#include "base/text.h"

namespace nanprov::replay {
namespace {

using nlohmann::json;

json layoutJson(const TensorLayout& l) {
  return {{"strides", l.strides ? json(*l.strides) : json(nullptr)},
          {"storage_offset", l.storage_offset ? json(*l.storage_offset) : json(nullptr)},
          {"alignment", l.alignment ? json(*l.alignment) : json(nullptr)}};
}

}  // namespace

json layoutsJson(const std::vector<LayoutReport>& layouts) {
  json out = json::object();
  for (const LayoutReport& l : layouts) {
    out[l.role] = {{"recorded", layoutJson(l.recorded)},
                   {"replayed", layoutJson(l.replayed)},
                   {"faithful", l.faithful()},
                   {"note", l.note.empty() ? json(nullptr) : json(l.note)}};
  }
  return out;
}

std::string layoutsText(const std::vector<LayoutReport>& layouts) {
  std::vector<std::string> faithful;
  std::string out;
  for (const LayoutReport& l : layouts) {
    if (l.faithful()) faithful.push_back(printable(l.role));
    else out += "layout: " + printable(l.role) + ": " + printable(l.note) + "\n";
  }
  if (!faithful.empty())
    out = "layout: " + joined(faithful, ", ") + " rebuilt as in the run (strides, storage offset, alignment)\n" + out;
  return out;
}

}  // namespace nanprov::replay
