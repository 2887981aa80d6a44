"""What the PyTorch peers of `benches/train_step.rs` share: the command line (shape, steps,
threads, device, dtype, batch) and the timed training step (AdamW with betas 0.9/0.98, eps 1e-6,
weight decay 0.01 on matrices, clipping at 1.0; bf16 compute by autocast with f32 master
weights, as `TwoTowerLm::with_compute_dtype(BF16)`), printed as one JSON line."""
import argparse
import json
import time

import torch


def parser(shapes, default_steps):
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=shapes, default="small")
    ap.add_argument("--steps", type=int, default=default_steps)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--batch", type=int, default=0, help="sequences per step (0: the shape's)")
    return ap


def time_steps(args, model, loss_of, b, t, extra=None):
    """Warm-up step, then `args.steps` timed steps of `loss_of()`; prints and returns the JSON."""
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
    print(json.dumps(out))
    return out
