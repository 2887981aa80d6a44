#!/usr/bin/env python3
"""The transformers peer of `benches/extract.rs`'s one-shot on a GPU: masked-mean embeddings of
a BERT-style encoder at T = 128, sequences per second.

    python3 scripts/peer_extract.py --random-bert DIR --tokenizer bert_base_uncased.json
        writes a bert-base-sized model with random weights (seed 0) to DIR (config.json,
        model.safetensors, tokenizer.json): the shared data has no bert-base weights, and a
        throughput measurement needs only the shapes;
    python3 scripts/peer_extract.py --model DIR --texts train.txt --device cuda --dtype bf16
        times the same batches our one-shot times (the first 32 WikiText paragraphs of more
        than 200 words, truncated to T = 128) and prints one JSON line.
"""
import argparse
import json
import shutil
import time

import torch
import transformers as tf

T = 128


def long_texts(path, n):
    out = []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if len(line.split()) > 200 and not line.startswith("="):
            out.append(line)
            if len(out) == n:
                break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--random-bert")
    ap.add_argument("--tokenizer")
    ap.add_argument("--model")
    ap.add_argument("--texts")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    if args.random_bert:
        torch.manual_seed(0)
        tf.BertModel(tf.BertConfig(), add_pooling_layer=False).save_pretrained(args.random_bert)
        shutil.copy(args.tokenizer, f"{args.random_bert}/tokenizer.json")
        return
    tok = tf.PreTrainedTokenizerFast(tokenizer_file=f"{args.model}/tokenizer.json")
    tok.pad_token = "[PAD]"
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = tf.AutoModel.from_pretrained(args.model, torch_dtype=dtype).to(args.device).eval()
    texts = long_texts(args.texts, args.batch)
    enc = tok(texts, truncation=True, max_length=T, padding="max_length", return_tensors="pt")
    enc = {k: v.to(args.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}

    def embed():
        with torch.inference_mode():
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            return (h * m).sum(1) / m.sum(1)

    embed()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.reps):
        embed()
    torch.cuda.synchronize()
    secs = time.perf_counter() - start
    print(json.dumps({"peer": "transformers", "dtype": args.dtype, "batch": args.batch,
                      "seq_per_s": args.reps * args.batch / secs}))


if __name__ == "__main__":
    main()
