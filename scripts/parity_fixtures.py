#!/usr/bin/env python3
"""Writes the parity fixtures of crates/lmd/tests/fixtures/ from Hugging Face transformers.

Each fixture folder holds a tiny randomly initialised checkpoint (fixed seed) in the standard HF
layout (config.json, model.safetensors, tokenizer.json) plus `expected.safetensors`: the token ids
and attention mask of `texts.json` (truncated to T) and the model's last hidden states, which the
Rust tests (crates/lmd/tests/encoder_parity.rs) must match at 1e-4. It also writes reference
embeddings of the real all-MiniLM-L6-v2 and of the shared hf-tiny-random BERT.

Run once where torch + transformers install (CPU is enough):
    python3 -m venv /tmp/pyenv && /tmp/pyenv/bin/pip install torch transformers safetensors
    /tmp/pyenv/bin/python scripts/parity_fixtures.py [--shared ../shared]
"""
import argparse
import json
import os

import torch
import transformers as tf
from safetensors.torch import save_file
from tokenizers import Tokenizer, processors
from tokenizers.implementations import BertWordPieceTokenizer, ByteLevelBPETokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "crates", "lmd", "tests", "fixtures")
T = 12
TEXTS = [
    "the cat sat on the mat .",
    "a quick brown fox jumps over the lazy dog and keeps running far away from here",
    "hello world",
    "language models divide language among themselves .",
]
TRAIN = TEXTS + [
    "the dog sat on the log and the cat ran .",
    "models of language read text one token at a time .",
    "over the hills and far away , the fox keeps running .",
]


def wordpiece(dirname):
    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(TRAIN, vocab_size=160, min_frequency=1)
    tok.save(os.path.join(dirname, "tokenizer.json"))
    return Tokenizer.from_file(os.path.join(dirname, "tokenizer.json"))


def byte_bpe(dirname, roberta):
    tok = ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] if roberta else ["<|endoftext|>"]
    tok.train_from_iterator(TRAIN, vocab_size=300, min_frequency=1, special_tokens=specials)
    if roberta:
        tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.save(os.path.join(dirname, "tokenizer.json"))
    return Tokenizer.from_file(os.path.join(dirname, "tokenizer.json"))


def encode(tok, texts, t, pad_id):
    tok.no_padding()
    tok.enable_truncation(max_length=t)
    enc = tok.encode_batch(texts)
    width = max(len(e.ids) for e in enc)
    ids = torch.full((len(texts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(texts), width), dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        mask[i, : len(e.ids)] = 1
    return ids, mask


ONLY = None


def fixture(name, config, model_cls, tok_kind):
    if ONLY and name not in ONLY:
        return
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    if tok_kind == "wordpiece":
        tok = wordpiece(d)
    else:
        tok = byte_bpe(d, roberta=(tok_kind == "roberta"))
    config.vocab_size = max(config.vocab_size, tok.get_vocab_size())
    torch.manual_seed(0)
    model = model_cls(config).eval()
    model.save_pretrained(d, safe_serialization=True)
    pad = getattr(config, "pad_token_id", None) or 0
    ids, mask = encode(tok, TEXTS, T, pad)
    extra = {}
    if name == "xlnet":
        # XLNet's tokenizer gives the text segment 0, the final <cls> segment 2, padding 3;
        # the LMD reference passes these token_type_ids to the model.
        tt = torch.full_like(ids, 3)
        for i, n in enumerate(mask.sum(1).tolist()):
            tt[i, :n] = 0
            tt[i, n - 1] = 2
        extra["token_type_ids"] = tt
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask, **extra).last_hidden_state
    save_file(
        {"input_ids": ids.contiguous(), "attention_mask": mask.contiguous(),
         "hidden": hidden.float().contiguous()},
        os.path.join(d, "expected.safetensors"),
    )
    json.dump({"texts": TEXTS, "t": T}, open(os.path.join(d, "texts.json"), "w"), indent=1)
    for junk in ("generation_config.json",):
        p = os.path.join(d, junk)
        if os.path.exists(p):
            os.remove(p)
    print(name, tuple(hidden.shape), sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)), "bytes")


def reference(model_dir, name, texts, t):
    """Masked-mean embeddings of a real model, computed as the LMD reference does (HF AutoModel)."""
    tok = tf.AutoTokenizer.from_pretrained(model_dir)
    model = tf.AutoModel.from_pretrained(model_dir).eval()
    b = tok(texts, padding=True, truncation=True, max_length=t, return_tensors="pt")
    with torch.no_grad():
        h = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
    m = b["attention_mask"].unsqueeze(-1).float()
    mean = (h * m).sum(1) / m.sum(1)
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    save_file({"input_ids": b["input_ids"].contiguous(), "attention_mask": b["attention_mask"].contiguous(),
               "mean": mean.contiguous()}, os.path.join(d, "expected.safetensors"))
    json.dump({"texts": texts, "t": t, "model": os.path.basename(model_dir)},
              open(os.path.join(d, "texts.json"), "w"), indent=1)
    print(name, tuple(mean.shape))


def llama2c_tokens(shared):
    """Token ids of the stories260K SentencePiece model (tok512.model) with BOS, for the Rust
    llama2.c tokenizer (which reads tok512.bin) to match."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=os.path.join(shared, "data", "stories260K", "tok512.model"))
    texts = [
        "Once upon a time, there was a little girl named Lily.",
        "The quick brown fox jumps over the lazy dog; it's 3:45 p.m. now!",
        "Valkyria Chronicles III was released in January 2011 (Japan).",
        "naïve café — über 😊",
    ]
    d = os.path.join(OUT, "stories260k-tokens")
    os.makedirs(d, exist_ok=True)
    json.dump({"texts": texts, "ids": [[1] + sp.encode(t) for t in texts]},
              open(os.path.join(d, "expected.json"), "w"), indent=1)
    print("stories260k-tokens", len(texts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "shared"))
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    args = ap.parse_args()
    global ONLY
    ONLY = set(args.only.split(",")) - {""}
    common = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                  max_position_embeddings=64, initializer_range=0.2, vocab_size=0)
    fixture("bert", tf.BertConfig(**common, type_vocab_size=2), tf.BertModel, "wordpiece")
    fixture("roberta", tf.RobertaConfig(**{**common, "max_position_embeddings": 66}, type_vocab_size=1,
            pad_token_id=1, bos_token_id=0, eos_token_id=2), tf.RobertaModel, "roberta")
    fixture("xlm-roberta", tf.XLMRobertaConfig(**{**common, "max_position_embeddings": 66}, type_vocab_size=1,
            pad_token_id=1, bos_token_id=0, eos_token_id=2), tf.XLMRobertaModel, "roberta")
    fixture("longformer", tf.LongformerConfig(**{**common, "max_position_embeddings": 66}, type_vocab_size=1,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2, attention_window=[4, 6]),
            tf.LongformerModel, "roberta")
    fixture("deberta", tf.DebertaConfig(**{**common, "max_position_embeddings": 8}, type_vocab_size=0,
            relative_attention=True, max_relative_positions=-1, pos_att_type=["c2p", "p2c"],
            position_biased_input=False, pad_token_id=0), tf.DebertaModel, "wordpiece")
    fixture("deberta-v2", tf.DebertaV2Config(**common, type_vocab_size=0, relative_attention=True,
            position_buckets=8, max_relative_positions=-1, pos_att_type=["p2c", "c2p"],
            norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False, pad_token_id=0),
            tf.DebertaV2Model, "wordpiece")
    fixture("electra", tf.ElectraConfig(**common, embedding_size=16), tf.ElectraModel, "wordpiece")
    fixture("distilbert", tf.DistilBertConfig(vocab_size=0, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
            max_position_embeddings=64, initializer_range=0.2), tf.DistilBertModel, "wordpiece")
    fixture("albert", tf.AlbertConfig(**{**common, "num_hidden_layers": 3}, embedding_size=16,
            num_hidden_groups=1, inner_group_num=1, hidden_act="gelu_new"), tf.AlbertModel, "wordpiece")
    fixture("xlnet", tf.XLNetConfig(vocab_size=0, d_model=32, n_layer=2, n_head=4, d_inner=37,
            initializer_range=0.2, pad_token_id=0), tf.XLNetModel, "wordpiece")
    fixture("gpt2", tf.GPT2Config(vocab_size=0, n_embd=32, n_layer=2, n_head=4, n_positions=64,
            initializer_range=0.2), tf.GPT2Model, "gpt2")
    if ONLY:
        return
    llama2c_tokens(args.shared)
    reference(os.path.join(args.shared, "models", "all-MiniLM-L6-v2"), "minilm-reference",
              ["A man is eating food.", "A man is eating a piece of bread.",
               "The stock market fell sharply today."], 16)
    reference(os.path.join(args.shared, "data", "hf-tiny-random", "BertForSequenceClassification"),
              "hf-tiny-bert-reference", ["hello world", "the cat sat on the mat"], 10)


if __name__ == "__main__":
    main()
