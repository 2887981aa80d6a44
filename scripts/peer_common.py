"""What the PyTorch peers of `benches/train_step.rs` share: the command line (shape, steps,
threads, device, dtype, batch, profile) and the timed training step (AdamW with betas 0.9/0.98,
eps 1e-6, weight decay 0.01 on matrices, clipping at 1.0; bf16 compute by autocast with f32
master weights, as `TwoTowerLm::with_compute_dtype(BF16)`), printed as one JSON line.

`--profile OUT.json` then runs `--profile-steps` more steps under torch.profiler (after the
timed ones, so that the profiler's cost stays out of the rate) and writes the kernel profile of
those steps in the shape of our CUPTI tracer's (`tools/cupti_trace`): per kernel name the count,
total and mean nanoseconds, and the share of the steps' span the GPU was busy (the union of
kernel, copy and set intervals over the span from the first start to the last end)."""
import argparse
import json
import os
import tempfile
import time


def parser(shapes, default_steps):
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=shapes, default="small")
    ap.add_argument("--steps", type=int, default=default_steps)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--batch", type=int, default=0, help="sequences per step (0: the shape's)")
    ap.add_argument("--profile", metavar="OUT.json", default=None,
                    help="also profile --profile-steps steps with torch.profiler into OUT.json")
    ap.add_argument("--profile-steps", type=int, default=3)
    return ap


def union_ns(intervals):
    """Nanoseconds covered by the union of half-open [start, end) intervals."""
    total, cur = 0, None
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if cur is None or start > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [start, end]
        else:
            cur[1] = max(cur[1], end)
    if cur is not None:
        total += cur[1] - cur[0]
    return total


def kernel_profile(acts, tool, window, steps):
    """The profile JSON (a dict) of `acts`, tuples (kind, name, start_ns, end_ns) with kind
    kernel, memcpy or memset (name read for kernels only), as `tools/cupti_trace/profile.cpp`
    computes it: an activity without a start or ending before it is incomplete and left out;
    kernels by total time, longest first, ties in the order first seen."""
    counts = {"kernel": [0, 0], "memcpy": [0, 0], "memset": [0, 0]}
    per_name = {}
    busy, incomplete = [], 0
    for kind, name, start, end in acts:
        if kind not in counts:
            continue
        if start <= 0 or end < start:
            incomplete += 1
            continue
        counts[kind][0] += 1
        counts[kind][1] += end - start
        if kind == "kernel":
            k = per_name.setdefault(name, [0, 0])
            k[0] += 1
            k[1] += end - start
        busy.append((start, end))
    span = max(e for _, e in busy) - min(s for s, _ in busy) if busy else 0
    busy_ns = union_ns(busy)
    order = sorted(enumerate(per_name.items()), key=lambda x: (-x[1][1][1], x[0]))
    return {
        "tool": tool, "window": window, "window_found": True, "syncs": 0, "steps": steps,
        "span_ns": span, "busy_ns": busy_ns, "busy_share": busy_ns / span if span else 0.0,
        "kernel_count": counts["kernel"][0], "kernel_ns": counts["kernel"][1],
        "memcpy_count": counts["memcpy"][0], "memcpy_ns": counts["memcpy"][1],
        "memset_count": counts["memset"][0], "memset_ns": counts["memset"][1],
        "incomplete": incomplete, "dropped": 0,
        "kernels": [{"name": n, "count": c, "total_ns": t, "mean_ns": t // c}
                    for _, (n, (c, t)) in order],
    }


# torch.profiler's trace categories of device activities, as kernel_profile's kinds.
TRACE_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def trace_activities(trace):
    """The device activities of a torch.profiler Chrome trace (microseconds) in nanoseconds."""
    acts = []
    for e in trace.get("traceEvents", []):
        kind = TRACE_KINDS.get(e.get("cat"))
        if kind is None or "ts" not in e:
            continue
        start = round(float(e["ts"]) * 1000)
        acts.append((kind, e.get("name", "?"), start, start + round(float(e.get("dur", 0)) * 1000)))
    return acts


def profile_steps(step, sync, steps, out_path):
    """`steps` calls of `step` under torch.profiler (CUDA activities), written as the profile
    JSON to `out_path`; returns the profile."""
    import torch

    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        sync()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    finally:
        os.unlink(path)
    p = kernel_profile(trace_activities(trace), "torch.profiler", f"{steps} profiled steps", steps)
    with open(out_path, "w") as f:
        json.dump(p, f)
    return p


def time_steps(args, model, loss_of, b, t, extra=None):
    """Warm-up step, then `args.steps` timed steps of `loss_of()`; prints and returns the JSON.
    With `args.profile`, `args.profile_steps` more steps profiled into that file."""
    import torch

    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.98), eps=1e-6,
    )
    bf16 = args.dtype == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    step()  # warm-up
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    secs = time.perf_counter() - start
    out = {"shape": args.shape, "batch": b, "seq": t, "device": args.device,
           "dtype": args.dtype, "tokens_per_s": args.steps * b * t / secs,
           "s_per_step": secs / args.steps, "threads": args.threads}
    out.update(extra or {})
    if args.profile:
        p = profile_steps(step, sync, args.profile_steps, args.profile)
        out["profile"] = args.profile
        out["profile_busy_share"] = p["busy_share"]
    print(json.dumps(out))
    return out
