// The kernel profile's arithmetic (profile.h): no CUPTI, no device, no I/O.
#include "profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace cupti_trace {

namespace {

/// A non-zero decimal number, with a leading '-' when negative, below 2^31 in magnitude; false
/// otherwise.
bool parse_index(const std::string& s, int32_t* out) {
  const bool negative = !s.empty() && s[0] == '-';
  const std::string digits = negative ? s.substr(1) : s;
  if (digits.empty() || digits.size() > 10) return false;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v == 0 || v > INT32_MAX) return false;
  *out = static_cast<int32_t>(negative ? -v : v);
  return true;
}

/// The 1-based position of window index `i` among `n` synchronisations (negative: from the
/// last); 0 when there is none.
uint64_t resolve(int32_t i, uint64_t n) {
  if (i > 0) return static_cast<uint64_t>(i) <= n ? static_cast<uint64_t>(i) : 0;
  const uint64_t back = static_cast<uint64_t>(-static_cast<int64_t>(i));
  return back <= n ? n + 1 - back : 0;
}

bool valid(const Activity& a) { return a.start > 0 && a.end >= a.start; }

}  // namespace

bool parse_window(const std::string& text, Window* w, std::string* why) {
  if (text.empty() || text == "all") {
    *w = Window{};
    return true;
  }
  const std::string prefix = "sync:";
  size_t colon = text.find(':', prefix.size());
  Window got;
  got.by_sync = true;
  if (text.compare(0, prefix.size(), prefix) != 0 || colon == std::string::npos ||
      !parse_index(text.substr(prefix.size(), colon - prefix.size()), &got.from) ||
      !parse_index(text.substr(colon + 1), &got.to)) {
    *why = "window \"" + text + "\" is neither all nor sync:A:B with non-zero A and B";
    return false;
  }
  if ((got.from > 0) == (got.to > 0) && got.from >= got.to) {
    *why = "window \"" + text + "\": A must come before B";
    return false;
  }
  *w = got;
  return true;
}

uint64_t union_ns(std::vector<std::pair<uint64_t, uint64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  uint64_t total = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  for (const auto& [start, end] : intervals) {
    if (end <= start) continue;
    if (!open || start > cur_end) {
      if (open) total += cur_end - cur_start;
      cur_start = start;
      cur_end = end;
      open = true;
    } else {
      // Overlapping or nested: the covered stretch ends at the later of the two ends.
      cur_end = std::max(cur_end, end);
    }
  }
  if (open) total += cur_end - cur_start;
  return total;
}

Profile aggregate(const std::vector<Activity>& acts, size_t n_names, const Window& w) {
  Profile p;
  std::vector<std::pair<uint64_t, uint64_t>> syncs;
  for (const Activity& a : acts) {
    if (a.kind == Kind::Sync && valid(a)) syncs.emplace_back(a.start, a.end);
  }
  std::sort(syncs.begin(), syncs.end());
  p.syncs = syncs.size();
  uint64_t lo = 0, hi = UINT64_MAX;
  if (w.by_sync) {
    const uint64_t from = resolve(w.from, syncs.size()), to = resolve(w.to, syncs.size());
    if (from > 0 && from < to) {
      lo = syncs[from - 1].second;
      hi = syncs[to - 1].second;
    } else {
      p.window_found = false;
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  std::vector<KernelStats> per_name(n_names);
  for (size_t i = 0; i < n_names; ++i) per_name[i] = KernelStats{static_cast<uint32_t>(i), 0, 0};
  uint64_t first = UINT64_MAX, last = 0;
  for (const Activity& a : acts) {
    if (a.kind == Kind::Sync) continue;
    if (!valid(a) || (a.kind == Kind::Kernel && a.name >= n_names)) {
      ++p.incomplete;
      continue;
    }
    // Launched inside the window: started at or after its opening synchronisation returned and
    // before its closing one did.
    if (a.start < lo || a.start >= hi) continue;
    const uint64_t ns = a.end - a.start;
    switch (a.kind) {
      case Kind::Kernel:
        ++p.kernel_count;
        p.kernel_ns += ns;
        ++per_name[a.name].count;
        per_name[a.name].total_ns += ns;
        break;
      case Kind::Memcpy:
        ++p.memcpy_count;
        p.memcpy_ns += ns;
        break;
      case Kind::Memset:
        ++p.memset_count;
        p.memset_ns += ns;
        break;
      case Kind::Sync:
        break;
    }
    busy.emplace_back(a.start, a.end);
    first = std::min(first, a.start);
    last = std::max(last, a.end);
  }
  if (!busy.empty()) p.span_ns = last - first;
  p.busy_ns = union_ns(std::move(busy));
  for (const KernelStats& k : per_name) {
    if (k.count > 0) p.kernels.push_back(k);
  }
  std::sort(p.kernels.begin(), p.kernels.end(), [](const KernelStats& a, const KernelStats& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  return p;
}

void json_string(std::string* out, const std::string& s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

namespace {

void field(std::string* out, const char* key, uint64_t v) {
  out->append(",\"").append(key).append("\":").append(std::to_string(v));
}

}  // namespace

std::string to_json(const Profile& p, const std::vector<std::string>& names, const Meta& meta) {
  std::string out = "{\"tool\":";
  json_string(&out, meta.tool);
  out.append(",\"window\":");
  json_string(&out, meta.window);
  out.append(",\"window_found\":").append(p.window_found ? "true" : "false");
  field(&out, "syncs", p.syncs);
  field(&out, "steps", meta.steps);
  field(&out, "span_ns", p.span_ns);
  field(&out, "busy_ns", p.busy_ns);
  char share[32];
  std::snprintf(share, sizeof share, "%.6f",
                p.span_ns > 0 ? static_cast<double>(p.busy_ns) / static_cast<double>(p.span_ns)
                              : 0.0);
  out.append(",\"busy_share\":").append(share);
  field(&out, "kernel_count", p.kernel_count);
  field(&out, "kernel_ns", p.kernel_ns);
  field(&out, "memcpy_count", p.memcpy_count);
  field(&out, "memcpy_ns", p.memcpy_ns);
  field(&out, "memset_count", p.memset_count);
  field(&out, "memset_ns", p.memset_ns);
  field(&out, "incomplete", p.incomplete);
  field(&out, "dropped", meta.dropped);
  out.append(",\"kernels\":[");
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const KernelStats& k = p.kernels[i];
    if (i > 0) out.push_back(',');
    out.append("{\"name\":");
    json_string(&out, k.name < names.size() ? names[k.name] : std::string("?"));
    field(&out, "count", k.count);
    field(&out, "total_ns", k.total_ns);
    field(&out, "mean_ns", k.total_ns / k.count);
    out.push_back('}');
  }
  out.append("]}\n");
  return out;
}

}  // namespace cupti_trace
