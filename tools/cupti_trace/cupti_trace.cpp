// A small CUPTI activity tracer, loaded into any CUDA process by the driver:
//
//   CUDA_INJECTION64_PATH=.gpu/run/libcupti_trace.so LMSPLIT_CUPTI_OUT=profile.json
//   LMSPLIT_CUPTI_WINDOW=sync:1:2 LMSPLIT_CUPTI_STEPS=3 <program>          (one environment)
//
// The driver calls InitializeInjection at cuInit; from then on CUPTI records every kernel
// (CONCURRENT_KERNEL), copy (MEMCPY), set (MEMSET) and host synchronisation (SYNCHRONIZATION)
// into buffers it hands back here, where each record is reduced to an interval and an interned,
// demangled kernel name. At exit the buffers are flushed and profile.cpp turns the window's
// intervals into the JSON at LMSPLIT_CUPTI_OUT (default cupti_trace.json): per kernel name the
// count, total and mean nanoseconds, and the share of the window's span the device was busy.
// LMSPLIT_CUPTI_WINDOW is profile.h's window (default all); LMSPLIT_CUPTI_STEPS is only
// recorded (the steps the window holds, for per-step figures). Messages go to stderr with the
// prefix "cupti_trace:"; a failure to start leaves the program running untraced.
//
// Built by scripts/gpu_pack.sh against the CUPTI of the CUDA 13.0 wheels (nvidia-cuda-cupti
// 13.0), which packs that libcupti.so.13 beside it: the library's run path ($ORIGIN, ahead of
// LD_LIBRARY_PATH) finds it there whatever CUPTI the machine's PyTorch ships.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "profile.h"

namespace {

using cupti_trace::Activity;
using cupti_trace::Kind;

/// What the buffers delivered so far, guarded by `mu` (CUPTI completes buffers on its own
/// thread; the flush at exit on the exiting one).
struct Trace {
  std::mutex mu;
  std::vector<Activity> acts;
  std::vector<std::string> names;
  std::unordered_map<std::string, uint32_t> ids;
  uint64_t dropped = 0;
};

Trace& trace() {
  // Never destroyed: the flush at exit may run after static destructors.
  static Trace* t = new Trace;
  return *t;
}

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kAlign = 8;

void report(const char* what, CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  std::fprintf(stderr, "cupti_trace: %s: %s\n", what, s ? s : "unknown error");
}

/// The readable name of a mangled kernel name, or the name itself.
std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  return out;
}

/// The index of `name` (interned; called with the trace's lock held).
uint32_t intern(Trace& t, const char* name) {
  std::string key = name ? name : "?";
  auto it = t.ids.find(key);
  if (it != t.ids.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(t.names.size());
  t.names.push_back(name ? demangle(name) : key);
  t.ids.emplace(std::move(key), id);
  return id;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
  Trace& t = trace();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
          t.acts.push_back(Activity{k->start, k->end, Kind::Kernel, intern(t, k->name)});
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
          t.acts.push_back(Activity{m->start, m->end, Kind::Memcpy, 0});
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
          t.acts.push_back(Activity{m->start, m->end, Kind::Memset, 0});
          break;
        }
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
          auto* s = reinterpret_cast<CUpti_ActivitySynchronization2*>(rec);
          // The host waiting for a stream or the whole context; not an event's wait.
          if (s->type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE ||
              s->type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE) {
            t.acts.push_back(Activity{s->start, s->end, Kind::Sync, 0});
          }
          break;
        }
        default:
          break;
      }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) {
      t.dropped += dropped;
    }
  }
  std::free(buffer);
}

const char* env_or(const char* key, const char* fallback) {
  const char* v = std::getenv(key);
  return v && *v ? v : fallback;
}

void write_profile() {
  CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (r != CUPTI_SUCCESS) report("cuptiActivityFlushAll", r);
  const std::string window_text = env_or("LMSPLIT_CUPTI_WINDOW", "all");
  cupti_trace::Window window;
  std::string why;
  if (!cupti_trace::parse_window(window_text, &window, &why)) {
    std::fprintf(stderr, "cupti_trace: %s; profiling every activity\n", why.c_str());
    window = cupti_trace::Window{};
  }
  Trace& t = trace();
  std::lock_guard<std::mutex> lock(t.mu);
  cupti_trace::Meta meta;
  meta.tool = "cupti";
  meta.window = window_text;
  meta.steps = std::strtoull(env_or("LMSPLIT_CUPTI_STEPS", "0"), nullptr, 10);
  meta.dropped = t.dropped;
  const cupti_trace::Profile p = cupti_trace::aggregate(t.acts, t.names.size(), window);
  const std::string json = cupti_trace::to_json(p, t.names, meta);
  const char* path = env_or("LMSPLIT_CUPTI_OUT", "cupti_trace.json");
  FILE* f = std::fopen(path, "w");
  if (!f || std::fwrite(json.data(), 1, json.size(), f) != json.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cupti_trace: could not write %s\n", path);
    return;
  }
  std::fprintf(stderr, "cupti_trace: %zu activities, %zu kernel names, window %s%s -> %s\n",
               t.acts.size(), t.names.size(), window_text.c_str(),
               p.window_found ? "" : " (not found: every activity)", path);
}

}  // namespace

/// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library; 1 on success.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) {
    report("cuptiActivityRegisterCallbacks", r);
    return 0;
  }
  const CUpti_ActivityKind kinds[] = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};
  for (CUpti_ActivityKind k : kinds) {
    r = cuptiActivityEnable(k);
    if (r != CUPTI_SUCCESS) {
      // A kind this CUPTI cannot record: the profile goes on without it (a window by
      // synchronisations then says it was not found).
      report("cuptiActivityEnable", r);
    }
  }
  std::atexit(write_profile);
  return 1;
}
