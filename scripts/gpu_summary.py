#!/usr/bin/env python3
"""The Markdown summary of one `scripts/gpu_measure.sh` session, from its work folder, for
docs/gpu.md to take as it is: the steps (status, seconds), gpu_check, tokens/s, MFU and
PyTorch / ours per style and kernel switch, the kernel profiles (the share of a step the GPU is
busy, kernel time per step, the longest kernels, ours and PyTorch's), and the `gpu`-protocol GPT
run's first updates with phase 1's minutes projected. What a step did not leave is a dash.

    python3 scripts/gpu_summary.py WORK > summary.md
"""
import json
import os
import sys

STYLES = [("gpt", "GPT"), ("bert", "BERT"), ("elmo", "ELMo")]
# Dense bf16 peak of an H100 / H200 SXM (TFLOP/s), as benches/train_step.rs divides by.
PEAK_TFLOPS = 989.4
TOP_KERNELS = 8


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def safe(name):
    return name.replace("/", "_").replace(":", "_").replace(",", "_")


def last_json(path, tail=1 << 16):
    """The last line of `path` that is a JSON object (in its last `tail` bytes), or None."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - tail))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def num(v, fmt="{:,.0f}"):
    return fmt.format(v) if isinstance(v, (int, float)) else "–"


def ms(seconds):
    return num(seconds * 1e3 if isinstance(seconds, (int, float)) else None, "{:.1f}")


def pct(share):
    return num(share * 100 if isinstance(share, (int, float)) else None, "{:.1f}%")


def ratio(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0:
        return f"{a / b:.2f}×"
    return "–"


def steps_table(steps):
    out = ["| step | status | exit | seconds | box |", "|---|---|---:|---:|---:|"]
    for s in steps:
        out.append(f"| `{s['step']}` | {s['status']} | {s['rc']} | {s['seconds']} | {s['box']} |")
    total = sum(float(s["seconds"]) for s in steps)
    out.append(f"\n{len(steps)} steps, {total:.0f} s; "
               f"{sum(s['status'] != 'ok' for s in steps)} not ok.")
    return out


def gpu_check_lines(work):
    j = load(os.path.join(work, "gpu_check", "gpu_check.json"))
    if j is None:
        return ["No gpu_check.json: the check did not finish (see its log)."]
    failed = j.get("failed", [])
    n = j.get("n_checks", 0)
    line = f"{n - len(failed)} of {n} checks PASS"
    if failed:
        line += "; FAIL: " + ", ".join(f"`{f}`" for f in failed)
    return [line + "."]


def throughput(work, steps):
    """Rows of the throughput table: ours per switch, then PyTorch, per style."""
    names = [s["step"] for s in steps]
    out = ["| style | kernels | tokens/s | MFU | ms/step | forward | backward | update "
           "| / all on | PyTorch / ours |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for style, label in STYLES:
        torch = last_json(os.path.join(work, "logs", safe(f"torch/{style}") + ".out")) or {}
        t_tps = torch.get("tokens_per_s")
        runs = [n for n in names if n.startswith(f"train_step/{style}/")]
        base = last_json(os.path.join(work, "logs", safe(f"train_step/{style}/on") + ".out")) or {}
        gflop = base.get("model_gflop_per_token")
        for n in runs:
            kernels = n.split("/", 2)[2]
            j = last_json(os.path.join(work, "logs", safe(n) + ".out")) or {}
            tps = j.get("tokens_per_s")
            shown = {"on": "all on", "off": "all off"}.get(kernels, f"off:{kernels}")
            out.append(
                f"| {label} | {shown} | {num(tps)} | {pct(j.get('mfu'))} "
                f"| {ms(j.get('s_per_step'))} | {ms(j.get('forward_s'))} "
                f"| {ms(j.get('backward_s'))} | {ms(j.get('update_s'))} "
                f"| {ratio(tps, base.get('tokens_per_s'))} | {ratio(t_tps, tps)} |")
        if torch:
            mfu = (t_tps * gflop / 1e3 / PEAK_TFLOPS
                   if isinstance(t_tps, (int, float)) and isinstance(gflop, (int, float)) else None)
            out.append(f"| {label} | PyTorch eager | {num(t_tps)} | {pct(mfu)} "
                       f"| {ms(torch.get('s_per_step'))} | – | – | – | – | 1.00× |")
    return out


def profile_tables(work):
    out = ["| style | side | window | GPU busy | span ms/step | kernel ms/step "
           "| copies+sets ms/step | kernels/step | kernel names |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    tops = []
    for style, label in STYLES:
        for side, name in [("ours", "ours (CUPTI)"), ("torch", "PyTorch (torch.profiler)")]:
            p = load(os.path.join(work, "profile", f"{side}-{style}.json"))
            if p is None:
                out.append(f"| {label} | {name} | – | – | – | – | – | – | – |")
                continue
            steps = p.get("steps") or 1
            window = p.get("window", "?")
            if not p.get("window_found", True):
                window += " (not found: the whole trace)"
            elif p.get("tool") == "cupti" and p.get("syncs") != 4 * steps + 2:
                # The one-shot synchronises 4 S + 2 times: more or fewer shift the window.
                window += f" (⚠ {p.get('syncs')} synchronisations, not {4 * steps + 2})"
            per = lambda ns: ns / steps / 1e6  # noqa: E731
            out.append(
                f"| {label} | {name} | {window} | {pct(p.get('busy_share'))} "
                f"| {per(p['span_ns']):.1f} | {per(p['kernel_ns']):.1f} "
                f"| {per(p['memcpy_ns'] + p['memset_ns']):.2f} "
                f"| {p['kernel_count'] / steps:,.0f} | {len(p['kernels'])} |")
            total = p["kernel_ns"] or 1
            tops.append(f"\n**{label}, {name}**: the {TOP_KERNELS} longest kernels of a step\n")
            tops.append("| kernel | launches/step | mean µs | ms/step | share |")
            tops.append("|---|---:|---:|---:|---:|")
            for k in p["kernels"][:TOP_KERNELS]:
                kname = k["name"].replace("|", "\\|")
                if len(kname) > 90:
                    kname = kname[:87] + "..."
                tops.append(f"| `{kname}` | {k['count'] / steps:g} | {k['mean_ns'] / 1e3:.1f} "
                            f"| {per(k['total_ns']):.2f} | {k['total_ns'] / total:.1%} |")
    return out + tops


def gpt_run_lines(work):
    r = load(os.path.join(work, "gpt_run.json"))
    if r is None:
        return ["No gpt_run.json: the run was not started."]
    step = r.get("manifest_step") or r.get("checkpoint_step") or r.get("said_step") or 0
    cmd = "`reproduce train --protocol gpu --only gpt-s0 --device cuda`"
    asked = r["updates_asked"]
    if r["stop"] == "exited":
        head = f"{cmd} exited by itself (exit {r['rc']}) before any stop: see logs/gpt_run.err."
    elif r["stop"] == "updates":
        head = f"{cmd}, from scratch, stopped by one SIGTERM once its log reached {asked:,} updates."
    else:
        head = (f"{cmd}, from scratch, stopped by one SIGTERM at its time box, short of the "
                f"{asked:,} updates asked.")
    lines = [
        head,
        "",
        "| updates done | exit | s to stop | s to first log line | updates/s (wall, logged) "
        "| tokens/s (trainer) | phase 1 total updates | phase 1 projected (min) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    first, logged = r.get("first_log_step") or 0, r.get("seconds_logged")
    wall_rate = ((r.get("log_step", 0) - first) / logged
                 if isinstance(logged, (int, float)) and logged > 0 else None)
    tokens, elapsed = r.get("checkpoint_tokens"), r.get("checkpoint_elapsed_s")
    trainer_tps = tokens / elapsed if tokens and elapsed else r.get("log_tokens_per_s")
    total = r.get("total_steps")
    projected = None
    if total and wall_rate:
        projected = ((r.get("seconds_to_first_log") or 0) + total / wall_rate) / 60
    lines.append(f"| {num(step)} | {r['rc']} | {num(r.get('seconds_to_stop'), '{:.1f}')} "
                 f"| {num(r.get('seconds_to_first_log'), '{:.1f}')} | {num(wall_rate, '{:.2f}')} "
                 f"| {num(trainer_tps)} | {num(total)} | {num(projected, '{:.1f}')} |")
    lines.append("\nProjected: the time to the first log line plus the protocol's updates at the "
                 "wall-clock rate between the first log line and the stop (validations and "
                 "checkpoints included); the heads and scoring come on top.")
    return lines


def main():
    work = sys.argv[1]
    steps = []
    try:
        with open(os.path.join(work, "steps.jsonl")) as f:
            steps = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        pass
    out = ["# GPU session", "", "## Steps", ""] + steps_table(steps)
    out += ["", "## gpu_check", ""] + gpu_check_lines(work)
    out += ["", "## Throughput: base_2tower, B 64 × T 128, bf16 on f32 masters", ""]
    out += throughput(work, steps)
    out += ["", f"MFU from model FLOPs per token against the dense bf16 peak of {PEAK_TFLOPS} "
            "TFLOP/s; `/ all on`: tokens/s against all our kernels on; PyTorch / ours: "
            "PyTorch eager's tokens/s (autocast on f32 masters, the same call) over the row's."]
    out += ["", "## Kernel profile: the timed steps of one call, per step", ""]
    out += profile_tables(work)
    out += ["", "GPU busy: the union of kernel, copy and set intervals over the span from the "
            "first start to the last end of the window (host gaps between launches are the "
            "rest)."]
    out += ["", "## The gpu protocol's GPT run, first updates", ""] + gpt_run_lines(work)
    print("\n".join(out))


if __name__ == "__main__":
    main()
