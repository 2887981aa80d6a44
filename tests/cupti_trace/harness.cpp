// Host harness of the kernel profile's arithmetic (tools/cupti_trace/profile.cpp, compiled beside
// it by tests/cupti_trace.rs under ASan/UBSan): constructed intervals whose union, window and
// per-kernel sums are worked out by hand below. Prints one "ok" line per case and then, for the
// Rust side, the activities of the `all` case and its JSON and the `sync:1:2` case's JSON; any
// mismatch prints "FAIL ..." and exits 1.
#include <cstdio>
#include <string>
#include <vector>

#include "profile.h"

using namespace cupti_trace;

namespace {

int failures = 0;

void expect_eq(const char* what, uint64_t got, uint64_t want) {
  if (got != want) {
    std::printf("FAIL %s: %llu, want %llu\n", what, static_cast<unsigned long long>(got),
                static_cast<unsigned long long>(want));
    ++failures;
  }
}

void expect(const char* what, bool ok) {
  if (!ok) {
    std::printf("FAIL %s\n", what);
    ++failures;
  }
}

uint64_t u(std::vector<std::pair<uint64_t, uint64_t>> v) { return union_ns(std::move(v)); }

void unions() {
  expect_eq("union of nothing", u({}), 0);
  expect_eq("one interval", u({{10, 25}}), 15);
  expect_eq("a gap", u({{10, 20}, {30, 45}}), 25);
  expect_eq("an overlap", u({{10, 20}, {15, 30}}), 20);
  expect_eq("touching", u({{10, 20}, {20, 30}}), 20);
  // Nested inside a long one: the long one alone; a later one reaching past it extends it.
  expect_eq("nested", u({{10, 100}, {20, 30}, {40, 50}}), 90);
  expect_eq("nested then past", u({{10, 100}, {20, 30}, {90, 120}}), 110);
  expect_eq("nested then a gap", u({{10, 100}, {20, 30}, {150, 160}}), 100);
  expect_eq("unsorted", u({{40, 50}, {10, 100}, {5, 12}}), 95);
  expect_eq("duplicates", u({{10, 20}, {10, 20}, {10, 20}}), 10);
  expect_eq("empty and reversed", u({{50, 40}, {60, 60}}), 0);
  expect_eq("empty inside a gap", u({{10, 20}, {25, 25}, {30, 40}}), 20);
  std::printf("ok unions\n");
}

void windows() {
  Window w;
  std::string why;
  expect("all", parse_window("all", &w, &why) && !w.by_sync);
  expect("empty is all", parse_window("", &w, &why) && !w.by_sync);
  expect("sync:1:2", parse_window("sync:1:2", &w, &why) && w.by_sync && w.from == 1 && w.to == 2);
  expect("sync:3:17", parse_window("sync:3:17", &w, &why) && w.from == 3 && w.to == 17);
  expect("sync:-14:-13",
         parse_window("sync:-14:-13", &w, &why) && w.from == -14 && w.to == -13);
  expect("sync:2:-1", parse_window("sync:2:-1", &w, &why) && w.from == 2 && w.to == -1);
  for (const char* bad : {"sync:2:1", "sync:1:1", "sync:0:1", "sync:-0:1", "sync:-1:-2",
                          "sync:-2:-2", "sync:1", "sync:a:b", "sync:1:2x", "sync::2", "sync:--1:2",
                          "sync:-:2", "foo", "sync:1:99999999999", "sync:1:2147483648"}) {
    why.clear();
    if (parse_window(bad, &w, &why)) {
      std::printf("FAIL window %s parsed\n", bad);
      ++failures;
    } else if (why.find(bad) == std::string::npos) {
      std::printf("FAIL window %s: the reason does not name it: %s\n", bad, why.c_str());
      ++failures;
    }
  }
  std::printf("ok windows\n");
}

Activity k(uint64_t s, uint64_t e, uint32_t name) { return {s, e, Kind::Kernel, name}; }
Activity cp(uint64_t s, uint64_t e) { return {s, e, Kind::Memcpy, 0}; }
Activity set(uint64_t s, uint64_t e) { return {s, e, Kind::Memset, 0}; }
Activity sync(uint64_t s, uint64_t e) { return {s, e, Kind::Sync, 0}; }

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Kernel:
      return "kernel";
    case Kind::Memcpy:
      return "memcpy";
    case Kind::Memset:
      return "memset";
    case Kind::Sync:
      return "sync";
  }
  return "?";
}

// Kernel names, indexed in the order the `all` case's activities first name them.
const std::vector<std::string> kNames = {"gemm", "softmax<\"bf16\">\\x", "nll\n\x01", "unused"};

// Two streams: a gemm from 100 to 300 with the softmax nested in it (150..200) on the other,
// a copy overlapping its end (250..350), a gap, the nll (400..450) and a set (440..460)
// overlapping it, a gemm after another gap (500..520), and two activities CUPTI left
// incomplete (an end before the start, no start).
std::vector<Activity> all_case() {
  return {k(100, 300, 0), k(150, 200, 1), cp(250, 350), k(400, 450, 2), set(440, 460),
          k(500, 520, 0), k(600, 590, 1), k(0, 10, 0)};
}

void all() {
  Profile p = aggregate(all_case(), kNames.size(), Window{});
  expect("all found", p.window_found);
  expect_eq("span", p.span_ns, 520 - 100);
  // 100..350, 400..460, 500..520.
  expect_eq("busy", p.busy_ns, 250 + 60 + 20);
  expect_eq("kernels", p.kernel_count, 4);
  expect_eq("kernel ns", p.kernel_ns, 200 + 50 + 50 + 20);
  expect_eq("copies", p.memcpy_count, 1);
  expect_eq("copy ns", p.memcpy_ns, 100);
  expect_eq("sets", p.memset_count, 1);
  expect_eq("set ns", p.memset_ns, 20);
  expect_eq("incomplete", p.incomplete, 2);
  expect_eq("names", p.kernels.size(), 3);
  if (p.kernels.size() == 3) {
    expect_eq("longest", p.kernels[0].name, 0);
    expect_eq("gemm count", p.kernels[0].count, 2);
    expect_eq("gemm ns", p.kernels[0].total_ns, 220);
    // softmax and nll tie at 50 ns: the earlier name first.
    expect_eq("tie", p.kernels[1].name, 1);
    expect_eq("nll", p.kernels[2].name, 2);
  }
  // A kernel whose name index is out of range counts as incomplete, not as a name.
  std::vector<Activity> stray = all_case();
  stray.push_back(k(700, 710, 9));
  p = aggregate(stray, kNames.size(), Window{});
  expect_eq("stray name", p.incomplete, 3);
  expect_eq("stray span", p.span_ns, 520 - 100);
  std::printf("ok all\n");
}

// The train_step one-shot's shape: a warm-up before the first synchronisation, the timed steps
// between the first and the second, the forward pass timed alone after them. The
// synchronisations come out of order, as buffers can deliver them.
std::vector<Activity> sync_case() {
  return {
      k(100, 900, 0),      // warm-up
      sync(200, 1000),     // 1st: waits for the warm-up, returns at 1000
      k(1000, 1100, 1),    // launched once it returned: starts at its end (inside)
      cp(1150, 1160),      //
      k(1200, 1500, 0),    // the last step: still running when the host waits
      sync(4000, 4500),    // 3rd
      sync(1300, 1500),    // 2nd: returns when that kernel ends
      k(1500, 1600, 2),    // launched after the 2nd returned: starts at its end (outside)
      k(3000, 3900, 0),    // the forward pass alone
      {1400, 1450, Kind::Memset, 0},  // queued behind the last step's kernel (inside)
  };
}

void by_sync() {
  Window w;
  std::string why;
  parse_window("sync:1:2", &w, &why);
  Profile p = aggregate(sync_case(), kNames.size(), w);
  expect("sync found", p.window_found);
  expect_eq("syncs", p.syncs, 3);
  expect_eq("sync kernels", p.kernel_count, 2);
  expect_eq("sync kernel ns", p.kernel_ns, 100 + 300);
  expect_eq("sync copies", p.memcpy_count, 1);
  expect_eq("sync sets", p.memset_count, 1);
  expect_eq("sync span", p.span_ns, 1500 - 1000);
  expect_eq("sync busy", p.busy_ns, 100 + 10 + 300);
  if (p.kernels.size() == 2) {
    expect_eq("sync longest", p.kernels[0].name, 0);
    expect_eq("sync longest ns", p.kernels[0].total_ns, 300);
  } else {
    expect_eq("sync names", p.kernels.size(), 2);
  }
  // Between the 2nd and the 3rd: the nll and the forward pass.
  parse_window("sync:2:3", &w, &why);
  p = aggregate(sync_case(), kNames.size(), w);
  expect_eq("2:3 kernels", p.kernel_count, 2);
  expect_eq("2:3 span", p.span_ns, 3900 - 1500);
  expect_eq("2:3 busy", p.busy_ns, 100 + 900);
  // Counted from the last: -3:-2 is 1:2 of three, and 1:-1 the 1st to the 3rd.
  parse_window("sync:-3:-2", &w, &why);
  p = aggregate(sync_case(), kNames.size(), w);
  expect("-3:-2 found", p.window_found);
  expect_eq("-3:-2 kernels", p.kernel_count, 2);
  expect_eq("-3:-2 busy", p.busy_ns, 100 + 10 + 300);
  parse_window("sync:1:-1", &w, &why);
  p = aggregate(sync_case(), kNames.size(), w);
  expect_eq("1:-1 kernels", p.kernel_count, 4);
  expect_eq("1:-1 span", p.span_ns, 3900 - 1000);
  // Before the first, or the A-th not before the B-th: not found.
  for (const char* missing : {"sync:-4:-3", "sync:3:-2", "sync:2:4"}) {
    parse_window(missing, &w, &why);
    p = aggregate(sync_case(), kNames.size(), w);
    if (p.window_found) {
      std::printf("FAIL window %s found\n", missing);
      ++failures;
    }
  }
  // A window past the last synchronisation: not found, every activity profiled.
  parse_window("sync:2:4", &w, &why);
  p = aggregate(sync_case(), kNames.size(), w);
  expect("past the syncs", !p.window_found);
  expect_eq("past the syncs: every kernel", p.kernel_count, 5);
  expect_eq("past the syncs: span", p.span_ns, 3900 - 100);
  std::printf("ok sync windows\n");
}

}  // namespace

int main() {
  unions();
  windows();
  all();
  by_sync();
  // For the Rust side: the `all` case as [kind, name, start, end] (kernels' names; every
  // activity, the incomplete ones too), its JSON, and the `sync:1:2` case's JSON.
  std::string acts = "acts: [";
  bool first = true;
  for (const Activity& a : all_case()) {
    if (!first) acts += ",";
    first = false;
    acts += "[\"";
    acts += kind_name(a.kind);
    acts += "\",";
    json_string(&acts, a.kind == Kind::Kernel ? kNames[a.name] : std::string());
    acts += "," + std::to_string(a.start) + "," + std::to_string(a.end) + "]";
  }
  std::printf("%s]\n", acts.c_str());
  Meta meta{"cupti", "all", 0, 2};
  std::printf("json all: %s", to_json(aggregate(all_case(), kNames.size(), Window{}), kNames,
                                      meta).c_str());
  Window w;
  std::string why;
  parse_window("sync:1:2", &w, &why);
  meta = Meta{"cupti", "sync:1:2", 1, 0};
  std::printf("json sync: %s",
              to_json(aggregate(sync_case(), kNames.size(), w), kNames, meta).c_str());
  if (failures > 0) {
    std::printf("%d failures\n", failures);
    return 1;
  }
  return 0;
}
