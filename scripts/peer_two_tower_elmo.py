#!/usr/bin/env python3
"""The PyTorch peer of `benches/train_step.rs` for ELMo: one training step of a two-tower ELMo.

The same wiring as `towers::TwoTowerLm` with `Style::Elmo`, `ElmoMode::BiLstm`: one shared
token table of width 2H with a LayerNorm, then Linear(2H, H) per tower; per tower a forward
and a backward `nn.LSTM` (2 layers, cell C), each followed by a projection Linear(C, H); the
backward LSTM reads the time-reversed sequence; outputs shifted so position t sees the forward
state after x_{t-1} and the backward state after x_{t+1} (zeros at the ends); tower output
[fwd ++ bwd] of width 2H. Joint head: concat(h_1, h_2) -> LayerNorm -> Linear(4H, 2H) -> GELU
-> LayerNorm -> logits tied to the token table + output bias; cross-entropy on every position
(the target at t is x_t). No dropout; AdamW (betas 0.9/0.98, eps 1e-6, weight decay 0.01 on
matrices) with gradient clipping at 1.0. Random tokens, no PAD. Prints the tokens per second of
the timed steps as its last line (JSON).

    python3 scripts/peer_two_tower_elmo.py --steps 5
    python3 scripts/peer_two_tower_elmo.py --shape base_2tower --device cuda --dtype bf16 --batch 64
    TRAIN_STEP_ONESHOT=elmo/peer_small/5 target/release/deps/train_step-<hash>
"""
import torch
import torch.nn as nn

from peer_common import parser, time_steps

# hidden H, cell C, vocab V, batch B, steps T
SHAPES = {
    "small": (128, 512, 8192, 16, 128),
    "base_2tower": (256, 2048, 30528, 4, 128),
    "tiny": (16, 32, 64, 16, 64),
}


class Direction(nn.Module):
    """A 2-layer LSTM of cell C followed by Linear(C, H) (`h2o`)."""

    def __init__(self, hidden, cell, layers):
        super().__init__()
        self.lstm = nn.LSTM(hidden, cell, num_layers=layers, batch_first=True)
        self.h2o = nn.Linear(cell, hidden)

    def forward(self, x):
        return self.h2o(self.lstm(x)[0])


class ElmoTower(nn.Module):
    def __init__(self, hidden, cell, layers):
        super().__init__()
        self.fwd = Direction(hidden, cell, layers)
        self.bwd = Direction(hidden, cell, layers)

    def forward(self, x):
        zero = torch.zeros_like(x[:, :1, : self.fwd.h2o.out_features])
        f = self.fwd(x)
        b = self.bwd(x.flip(1)).flip(1)
        # Position t: forward state after x_{t-1}, backward state after x_{t+1}.
        f = torch.cat([zero, f[:, :-1]], dim=1)
        b = torch.cat([b[:, 1:], zero], dim=1)
        return torch.cat([f, b], dim=-1)


class TwoTowerElmo(nn.Module):
    def __init__(self, hidden, cell, vocab, layers=2, towers=2):
        super().__init__()
        e = 2 * hidden
        self.wte = nn.Embedding(vocab, e)
        self.ln_embed = nn.LayerNorm(e)
        self.inputs = nn.ModuleList([nn.Linear(e, hidden) for _ in range(towers)])
        self.towers = nn.ModuleList([ElmoTower(hidden, cell, layers) for _ in range(towers)])
        kd = towers * 2 * hidden
        self.ln_in = nn.LayerNorm(kd)
        self.dense = nn.Linear(kd, e)
        self.ln_out = nn.LayerNorm(e)
        self.out_bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids):
        shared = self.ln_embed(self.wte(ids))
        h = torch.cat([t(p(shared)) for p, t in zip(self.inputs, self.towers)], dim=-1)
        x = self.ln_out(nn.functional.gelu(self.dense(self.ln_in(h))))
        logits = x @ self.wte.weight.t() + self.out_bias
        return nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), ids.view(-1))


def main():
    args = parser(SHAPES, 5).parse_args()
    torch.manual_seed(0)
    hidden, cell, vocab, b, t = SHAPES[args.shape]
    b = args.batch or b
    model = TwoTowerElmo(hidden, cell, vocab).to(args.device)
    ids = torch.randint(0, vocab, (b, t), device=args.device)
    time_steps(args, model, lambda: model(ids), b, t, {"style": "elmo"})


if __name__ == "__main__":
    main()
