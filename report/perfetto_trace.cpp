#include "report/perfetto_trace.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "base/records/call_name.h"
#include "report/call_kernels.h"

namespace nanprov::report {
namespace {

using nlohmann::json;

// Perfetto reads pid 0 as the kernel's idle task and a tid as unique across processes (Linux's
// model: the same tid under two pids is one thread that moved), so rank r is process r + 1 and
// each rank owns a block of tids.
constexpr int64_t kTidsPerRank = 1000;
constexpr int64_t kTrainingSlot = 1, kAutogradSlot = 2, kSummarisedSlot = 3, kFirstStreamSlot = 10;

int64_t pidOf(int rank) { return int64_t{rank} + 1; }
// More streams than a rank's block holds share its last track; fitting keeps that track nested.
int64_t tidOf(int rank, int64_t slot) { return pidOf(rank) * kTidsPerRank + std::min(slot, kTidsPerRank - 1); }

// One "X" event before it is written. Times stay in the store's integer ns until the end, so
// that fitting slices into one another is exact; µs are written last.
struct Slice {
  int64_t pid = 0, tid = 0;
  int depth = 0;  // what it may enclose on its track: a step (0) encloses calls (1)
  int64_t start_ns = 0, end_ns = 0;
  int64_t stored_start_ns = 0, stored_end_ns = 0;
  json event;  // name, cat, args; ph, pid, tid, ts and dur are added when written
};

// Start order, enclosing slices first: a step before the call that starts with it.
bool startsFirst(const Slice* a, const Slice* b) {
  return std::tuple(a->start_ns, a->depth, -a->end_ns) < std::tuple(b->start_ns, b->depth, -b->end_ns);
}

// Perfetto draws a track as a stack: a slice must end before the next one at its depth starts and
// lie inside the one it starts in, or it is dropped or drawn misplaced. Stored times can break
// that by a little: kernels that overlap on a stream (programmatic dependent launch), calls of two
// threads on one track, a call that outlasts its step's recorded end. Slices are fitted in start
// order: one that starts inside a slice of its own depth (or a deeper one) starts when that ends;
// one that starts inside an enclosing slice lies within it (that slice may itself have been moved
// to start later). Their stored times stay in their args.
void fitTrack(std::vector<Slice*>& track) {
  std::sort(track.begin(), track.end(), startsFirst);
  std::vector<Slice*> open;
  for (Slice* s : track) {
    while (!open.empty()) {
      Slice* top = open.back();
      if (top->end_ns > s->start_ns && top->depth < s->depth) break;  // s starts inside its parent
      if (top->end_ns > s->start_ns) s->start_ns = top->end_ns;       // a sibling still running
      open.pop_back();
    }
    if (!open.empty()) {
      s->start_ns = std::max(s->start_ns, open.back()->start_ns);
      s->end_ns = std::min(s->end_ns, open.back()->end_ns);
    }
    s->end_ns = std::max(s->end_ns, s->start_ns);
    open.push_back(s);
  }
}

// µs, the trace-event format's unit, from ns past the run's origin.
double micros(int64_t ns, int64_t origin_ns) { return static_cast<double>(ns - origin_ns) / 1e3; }

class TraceBuilder {
 public:
  explicit TraceBuilder(const Timeline& timeline) : timeline_(timeline) {}

  json build() {
    call_slice_.resize(timeline_.calls.size());
    for (size_t i = 0; i < timeline_.calls.size(); ++i) addCall(i);
    for (const TimelineRank& rank : timeline_.ranks) addSteps(rank), addSummarised(rank);
    fitTracks();
    return write();
  }

 private:
  size_t addSlice(int rank, int64_t slot, int depth, int64_t start_ns, int64_t end_ns, json event) {
    Slice s{.pid = pidOf(rank),
            .tid = tidOf(rank, slot),
            .depth = depth,
            .start_ns = start_ns,
            .end_ns = std::max(start_ns, end_ns),
            .stored_start_ns = start_ns,
            .stored_end_ns = end_ns,
            .event = std::move(event)};
    slices_.push_back(std::move(s));
    return slices_.size() - 1;
  }

  void addCall(size_t index) {
    const CallRecord& c = timeline_.calls[index].call;
    const CallHealth& h = timeline_.calls[index].health;
    json args = {{"module", c.module},
                 {"phase", phaseName(c.phase)},
                 {"step", c.step},
                 {"health", edgeKindName(h.kind)},
                 {"nonfinite_inputs", h.nonfinite_inputs},
                 {"nonfinite_outputs", h.nonfinite_outputs},
                 {"op", c.op},
                 {"backend", c.backend},
                 {"device", c.device.name()},
                 {"seq", c.seq}};
    if (c.recompute) args["recompute"] = true;
    if (!c.injected.empty()) args["injected"] = c.injected;
    if (timeline_.first_edge == index) args["first_edge"] = true;
    if (timeline_.first_source_edge == index && timeline_.first_edge != index) args["first_source_edge"] = true;
    json event = {{"name", callName(c)}, {"cat", "attention"}, {"args", std::move(args)}};
    // chrome://tracing's reserved colours; Perfetto colours by name.
    if (h.kind == EdgeKind::kSourceEdge) event["cname"] = "terrible";
    if (h.kind == EdgeKind::kPropagated) event["cname"] = "bad";
    // No thread id is stored, so the phase picks the track: the autograd engine runs backward
    // calls, and the forwards activation checkpointing recomputes inside them, on a thread of its
    // own on CUDA (on the CPU, on the thread that called backward()).
    const bool in_backward = c.phase == Phase::kBackward || c.recompute;
    call_slice_[index] =
        addSlice(c.rank, in_backward ? kAutogradSlot : kTrainingSlot, 1, c.start_ns, c.end_ns, std::move(event));
    addKernels(c, timeline_.calls[index].kernels, call_slice_[index]);
    auto [span, fresh] = step_spans_.try_emplace({c.rank, c.step}, c.start_ns, c.end_ns);
    if (!fresh) {
      span->second.first = std::min(span->second.first, c.start_ns);
      span->second.second = std::max(span->second.second, c.end_ns);
    }
  }

  // The call's CUDA kernels where CUPTI traced them; a CPU call's "kernel" is the call itself.
  void addKernels(const CallRecord& c, const std::vector<KernelRecord>& kernels, size_t call_slice) {
    const json described = kernelsJson(kernels);
    for (size_t i = 0; i < kernels.size(); ++i) {
      const KernelRecord& k = kernels[i];
      json args = described[i];
      args["call"] = callName(c);
      // CUPTI stamps kernels with CLOCK_REALTIME on Linux (its documented default, which the
      // tracer keeps), the clock the calls are stamped with: one origin serves both.
      size_t kernel = addSlice(c.rank, streamSlot(c.rank, k.device, k.stream), 0, k.start_ns, k.end_ns,
                               {{"name", shortKernelName(k.name)}, {"cat", "kernel"}, {"args", std::move(args)}});
      launches_.emplace_back(call_slice, kernel);
    }
  }

  int64_t streamSlot(int rank, int device, int64_t stream) {
    auto& slots = streams_[rank];
    auto it = slots.find({device, stream});
    if (it != slots.end()) return it->second;
    int64_t slot = kFirstStreamSlot + static_cast<int64_t>(slots.size());
    slots.emplace(std::pair(device, stream), slot);
    return slot;
  }

  // A step's event spans from the end the store recorded for the step before (the optimizer's
  // step post hook; in inference, the next forward pass opening) to its own, widened to hold
  // every call of the step. Where an end is not recorded (the first step's start; a last step the
  // run did not finish) the step's first or last attention call stands in: nothing is invented.
  void addSteps(const TimelineRank& rank) {
    const std::map<int64_t, int64_t>& ends = rank.step_ends_ns;
    std::set<int64_t> steps;
    for (const auto& [step, end] : ends) steps.insert(step);
    for (auto it = step_spans_.lower_bound({rank.rank, std::numeric_limits<int64_t>::min()});
         it != step_spans_.end() && it->first.first == rank.rank; ++it) {
      steps.insert(it->first.second);
    }
    const bool passes = timeline_.step_unit == StepUnit::kForwardPass;
    for (int64_t step : steps) {
      std::optional<int64_t> start, end;
      std::string start_from = "the end recorded for the step before", end_from = "its recorded end";
      if (auto before = ends.find(step - 1); before != ends.end()) start = before->second;
      if (auto own = ends.find(step); own != ends.end()) end = own->second;
      if (auto calls = step_spans_.find({rank.rank, step}); calls != step_spans_.end()) {
        auto [first, last] = calls->second;
        if (!start) start_from = "its first attention call";
        if (!end) end_from = "its last attention call (no end recorded)";
        start = std::min(start.value_or(first), first);
        end = std::max(end.value_or(last), last);
      }
      if (!start || !end) continue;
      json args = {{"step", step}, {"start", start_from}, {"end", end_from}};
      addSlice(
          rank.rank, kTrainingSlot, 0, *start, *end,
          {{"name", (passes ? "forward pass " : "step ") + std::to_string(step)}, {"cat", "step"}, {"args", args}});
    }
  }

  // A stretch of summarised steps on a track of its own (it spans several step slices, so it
  // cannot nest in one): from the end recorded for the step before it to its last step's end,
  // the nearest recorded ones where those were not kept. With neither, no slice: the command's
  // line still says what was summarised.
  void addSummarised(const TimelineRank& rank) {
    const std::map<int64_t, int64_t>& ends = rank.step_ends_ns;
    for (const SummarisedStretch& s : rank.summarised) {
      auto before = ends.upper_bound(s.first_step - 1);
      auto after = ends.lower_bound(s.last_step);
      if (before == ends.begin() || after == ends.end()) continue;
      const std::string steps = std::to_string(s.first_step) + "-" + std::to_string(s.last_step);
      json args = {{"steps", steps},
                   {"calls", s.calls},
                   {"not_clean", s.not_clean},
                   {"why",
                    "the store budget kept one summary row per step, layer and phase (nanprov run "
                    "--store-budget): these calls have no slice"},
                   {"see", "nanprov sql " + timeline_.run + " \"SELECT * FROM step_summaries WHERE last_step >= " +
                               std::to_string(s.first_step) + " AND step <= " + std::to_string(s.last_step) + "\""}};
      json event = {{"name", "summarised: " + std::to_string(s.calls) + " calls, steps " + steps},
                    {"cat", "summarised"},
                    {"args", std::move(args)}};
      if (s.not_clean > 0) event["cname"] = "bad";
      addSlice(rank.rank, kSummarisedSlot, 0, std::prev(before)->second, after->second, std::move(event));
    }
  }

  void fitTracks() {
    std::map<std::pair<int64_t, int64_t>, std::vector<Slice*>> tracks;
    for (Slice& s : slices_) tracks[{s.pid, s.tid}].push_back(&s);
    for (auto& [key, track] : tracks) fitTrack(track);
  }

  json write() {
    int64_t origin = std::numeric_limits<int64_t>::max();
    for (const Slice& s : slices_) origin = std::min(origin, s.stored_start_ns);
    if (slices_.empty()) origin = 0;

    json events = json::array();
    for (const TimelineRank& rank : timeline_.ranks) addTrackNames(rank.rank, events);

    // In start order, enclosing slices first: a viewer that keeps file order for equal
    // timestamps then opens a step before its first call.
    std::vector<const Slice*> order;
    for (const Slice& s : slices_) order.push_back(&s);
    std::stable_sort(order.begin(), order.end(), startsFirst);
    for (const Slice* s : order) {
      json e = s->event;
      e["ph"] = "X";
      e["pid"] = s->pid;
      e["tid"] = s->tid;
      e["ts"] = micros(s->start_ns, origin);
      e["dur"] = micros(s->end_ns, s->start_ns);
      if (s->start_ns != s->stored_start_ns || s->end_ns != s->stored_end_ns) {
        e["args"]["stored_ts"] = micros(s->stored_start_ns, origin);
        e["args"]["stored_dur"] = micros(s->stored_end_ns, s->stored_start_ns);
      }
      events.push_back(std::move(e));
    }

    // Flow arrows from each call to its kernels (v1 events: "s" binds to the slice open at its
    // time on its track, "f" with "bp":"e" to the slice enclosing it). Midpoints lie inside a
    // slice that lasts; one that fitting shrank to nothing has no inside, and its arrow would bind
    // to its parent or neighbour, so it gets none (counted in otherData).
    int64_t flow_id = 0, flows_dropped = 0;
    for (const auto& [call, kernel] : launches_) {
      const Slice& from = slices_[call];
      const Slice& to = slices_[kernel];
      if (from.end_ns <= from.start_ns || to.end_ns <= to.start_ns) {
        ++flows_dropped;
        continue;
      }
      ++flow_id;
      events.push_back({{"ph", "s"},
                        {"id", flow_id},
                        {"cat", "launch"},
                        {"name", "launch"},
                        {"pid", from.pid},
                        {"tid", from.tid},
                        {"ts", micros(midpoint(from), origin)}});
      events.push_back({{"ph", "f"},
                        {"bp", "e"},
                        {"id", flow_id},
                        {"cat", "launch"},
                        {"name", "launch"},
                        {"pid", to.pid},
                        {"tid", to.tid},
                        {"ts", micros(midpoint(to), origin)}});
    }

    markEdge(timeline_.first_edge, "first non-finite edge: ", events, origin);
    if (timeline_.first_source_edge != timeline_.first_edge)
      markEdge(timeline_.first_source_edge, "first source edge: ", events, origin);

    json other = {{"generator", "nanprov trace"},
                  {"run", timeline_.run},
                  {"time_origin_ns", origin},
                  {"clock", "CLOCK_REALTIME"}};
    if (timeline_.first_edge) other["first_edge"] = callName(timeline_.calls[*timeline_.first_edge].call);
    if (flows_dropped) other["flows_without_room"] = flows_dropped;
    return {{"traceEvents", std::move(events)}, {"otherData", std::move(other)}};
  }

  static int64_t midpoint(const Slice& s) { return s.start_ns + (s.end_ns - s.start_ns) / 2; }

  // A process-wide instant at the call's start: it draws as a line across the rank, wherever its
  // tracks are scrolled, and needs no room in a track's stack.
  void markEdge(std::optional<size_t> index, const std::string& label, json& events, int64_t origin) {
    if (!index) return;
    const CallRecord& c = timeline_.calls[*index].call;
    const Slice& s = slices_[call_slice_[*index]];
    const json& args = s.event["args"];
    events.push_back({{"ph", "i"},
                      {"s", "p"},
                      {"name", label + callName(c)},
                      {"cat", "edge"},
                      {"pid", s.pid},
                      {"tid", s.tid},
                      {"ts", micros(s.start_ns, origin)},
                      {"args",
                       {{"call", callName(c)},
                        {"module", c.module},
                        {"phase", phaseName(c.phase)},
                        {"step", c.step},
                        {"health", args["health"]},
                        {"origin", originName(timeline_.origin)},
                        {"nonfinite_inputs", args["nonfinite_inputs"]},
                        {"nonfinite_outputs", args["nonfinite_outputs"]}}}});
  }

  // Metadata: the rank's process name and order, and a name for each track it uses.
  void addTrackNames(int rank, json& events) const {
    auto meta = [&](const char* name, int64_t tid, json args) {
      events.push_back({{"ph", "M"}, {"name", name}, {"pid", pidOf(rank)}, {"tid", tid}, {"args", std::move(args)}});
    };
    meta("process_name", tidOf(rank, kTrainingSlot), {{"name", "rank " + std::to_string(rank)}});
    meta("process_sort_index", tidOf(rank, kTrainingSlot), {{"sort_index", rank}});
    std::set<int64_t> used;
    for (const Slice& s : slices_) {
      if (s.pid == pidOf(rank)) used.insert(s.tid);
    }
    auto thread = [&](int64_t slot, const std::string& name) {
      if (!used.count(tidOf(rank, slot))) return;
      meta("thread_name", tidOf(rank, slot), {{"name", name}});
      meta("thread_sort_index", tidOf(rank, slot), {{"sort_index", slot}});
    };
    thread(kTrainingSlot, kTrainingThreadTrack);
    thread(kAutogradSlot, kAutogradTrack);
    thread(kSummarisedSlot, kSummarisedTrack);
    auto streams = streams_.find(rank);
    if (streams == streams_.end()) return;
    std::set<int> devices;
    for (const auto& [key, slot] : streams->second) devices.insert(key.first);
    for (const auto& [key, slot] : streams->second) {
      const auto& [device, stream] = key;
      thread(slot, "CUDA stream " + std::to_string(stream) +
                       (devices.size() > 1 ? " (" + Device::cuda(device).name() + ")" : ""));
    }
  }

  const Timeline& timeline_;
  std::vector<Slice> slices_;
  std::vector<size_t> call_slice_;                                     // run.calls index → its slice
  std::vector<std::pair<size_t, size_t>> launches_;                    // (call slice, kernel slice)
  std::map<int, std::map<std::pair<int, int64_t>, int64_t>> streams_;  // rank → (device, stream) → slot
  std::map<std::pair<int, int64_t>, std::pair<int64_t, int64_t>>
      step_spans_;  // (rank, step) → its calls' first start, last end
};

}  // namespace

json perfettoTrace(const Timeline& timeline) { return TraceBuilder(timeline).build(); }

}  // namespace nanprov::report
