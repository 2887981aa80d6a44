#!/usr/bin/env python3
"""The PyTorch peer of `benches/train_step.rs`: one training step of a two-tower GPT.

Two Hugging Face GPT-2 towers share one token and one position table; the joint head is
concat(h_1, h_2) -> LayerNorm -> Linear(2H, H) -> GELU -> LayerNorm -> logits tied to the token
table + output bias (the same wiring as `towers::TwoTowerLm`, no dropout); AdamW (betas
0.9/0.98, eps 1e-6, weight decay 0.01) with gradient clipping at 1.0. Prints the tokens per
second of the timed steps as its last line (JSON).

    /tmp/pyenv/bin/python scripts/peer_two_tower_gpt.py --shape small --steps 20
    TRAIN_STEP_ONESHOT=gpt/peer_small/10 farm-bench -n 4 \
        --vs "/tmp/pyenv/bin/python scripts/peer_two_tower_gpt.py --shape small" \
        -- target/release/deps/train_step-<hash>
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import transformers as tf

SHAPES = {
    # layers, hidden, heads, vocab, batch
    "small": (2, 128, 4, 8192, 16),
    "medium": (4, 256, 4, 30528, 8),
}


class TwoTowerGpt(nn.Module):
    def __init__(self, layers, hidden, heads, vocab, t):
        super().__init__()
        cfg = tf.GPT2Config(
            vocab_size=vocab, n_positions=t, n_embd=hidden, n_layer=layers, n_head=heads,
            n_inner=4 * hidden, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            activation_function="gelu", bos_token_id=0, eos_token_id=0,
        )
        self.towers = nn.ModuleList([tf.GPT2Model(cfg) for _ in range(2)])
        # One shared token and position table.
        self.towers[1].wte = self.towers[0].wte
        self.towers[1].wpe = self.towers[0].wpe
        self.ln_in = nn.LayerNorm(2 * hidden)
        self.dense = nn.Linear(2 * hidden, hidden)
        self.ln_out = nn.LayerNorm(hidden)
        self.out_bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids, labels):
        h = torch.cat([t(input_ids=ids).last_hidden_state for t in self.towers], dim=-1)
        x = self.ln_out(nn.functional.gelu(self.dense(self.ln_in(h))))
        logits = x @ self.towers[0].wte.weight.t() + self.out_bias
        return nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=SHAPES, default="small")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    layers, hidden, heads, vocab, b = SHAPES[args.shape]
    t = 128
    model = TwoTowerGpt(layers, hidden, heads, vocab, t)
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    no_decay = [p for n, p in model.named_parameters() if p.dim() <= 1]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.98), eps=1e-6,
    )
    ids = torch.randint(0, vocab, (b, t))
    labels = torch.randint(0, vocab, (b, t))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(ids, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    secs = time.perf_counter() - start
    print(json.dumps({"shape": args.shape, "tokens_per_s": args.steps * b * t / secs,
                      "s_per_step": secs / args.steps, "threads": args.threads}))


if __name__ == "__main__":
    main()
