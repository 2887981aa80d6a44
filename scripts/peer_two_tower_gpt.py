#!/usr/bin/env python3
"""The PyTorch peer of `benches/train_step.rs`: one training step of a two-tower GPT or BERT.

Two Hugging Face GPT-2 towers share one token and one position table; the joint head is
concat(h_1, h_2) -> LayerNorm -> Linear(2H, H) -> GELU -> LayerNorm -> logits tied to the token
table + output bias (the same wiring as `towers::TwoTowerLm`, no dropout); AdamW (betas
0.9/0.98, eps 1e-6, weight decay 0.01) with gradient clipping at 1.0. Prints the tokens per
second of the timed steps as its last line (JSON).

`--style bert`: one shared token table of width 2H with a LayerNorm, projected by Linear(2H, H)
into each of two Hugging Face BERT encoders (bidirectional, no token types), the same joint
head; the loss on every position (the matrix work of masked LM at full-sequence cost, which is
what our trainer computes before selecting the masked positions).

On a GPU (`--device cuda --dtype bf16 --shape base --batch 64`) it is the peer of
`TRAIN_STEP_ONESHOT=gpt/base_2tower/20 TRAIN_STEP_DEVICE=cuda TRAIN_STEP_DTYPE=bf16`.

    /tmp/pyenv/bin/python scripts/peer_two_tower_gpt.py --shape small --steps 20
    TRAIN_STEP_ONESHOT=gpt/peer_small/10 farm-bench -n 4 \
        --vs "/tmp/pyenv/bin/python scripts/peer_two_tower_gpt.py --shape small" \
        -- target/release/deps/train_step-<hash>
"""
import torch
import torch.nn as nn
import transformers as tf

from peer_common import parser, time_steps

SHAPES = {
    # layers, hidden, heads, vocab, batch
    "small": (2, 128, 4, 8192, 16),
    "medium": (4, 256, 4, 30528, 8),
    "base": (12, 384, 12, 30528, 4),
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


class TwoTowerBert(nn.Module):
    def __init__(self, layers, hidden, heads, vocab, t):
        super().__init__()
        cfg = tf.BertConfig(
            vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
            num_attention_heads=heads, intermediate_size=4 * hidden, max_position_embeddings=t,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, type_vocab_size=1,
        )
        self.tokens = nn.Embedding(vocab, 2 * hidden)
        self.ln_embed = nn.LayerNorm(2 * hidden)
        self.proj = nn.ModuleList([nn.Linear(2 * hidden, hidden) for _ in range(2)])
        self.towers = nn.ModuleList([tf.BertModel(cfg, add_pooling_layer=False) for _ in range(2)])
        self.ln_in = nn.LayerNorm(2 * hidden)
        self.dense = nn.Linear(2 * hidden, 2 * hidden)
        self.ln_out = nn.LayerNorm(2 * hidden)
        self.out_bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids, labels):
        e = self.ln_embed(self.tokens(ids))
        h = torch.cat([t(inputs_embeds=p(e)).last_hidden_state
                       for t, p in zip(self.towers, self.proj)], dim=-1)
        x = self.ln_out(nn.functional.gelu(self.dense(self.ln_in(h))))
        logits = x @ self.tokens.weight.t() + self.out_bias
        return nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))


def main():
    ap = parser(SHAPES, 10)
    ap.add_argument("--style", choices=["gpt", "bert"], default="gpt")
    args = ap.parse_args()
    torch.manual_seed(0)
    layers, hidden, heads, vocab, b = SHAPES[args.shape]
    b = args.batch or b
    t = 128
    cls = TwoTowerGpt if args.style == "gpt" else TwoTowerBert
    model = cls(layers, hidden, heads, vocab, t).to(args.device)
    ids = torch.randint(0, vocab, (b, t), device=args.device)
    labels = torch.randint(0, vocab, (b, t), device=args.device)
    time_steps(args, model, lambda: model(ids, labels), b, t, {"style": args.style})


if __name__ == "__main__":
    main()
