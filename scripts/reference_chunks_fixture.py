#!/usr/bin/env python3
"""Fixture for `corpus::reference_chunks`: the LMD reference's (haozhg/lmd `cli.py`) sequence
texts, produced with Hugging Face transformers from the first rows of WikiText-2 test.

The reference tokenizes every dataset row with special tokens, concatenates the ids of each
`datasets.map(batched=True)` batch of rows, cuts them into T-token chunks (dropping each batch's
remainder) and decodes each chunk with `batch_decode(skip_special_tokens=True)` (tokenization
spaces cleaned up, transformers' default when the reference ran). This script does the same
with the shared bert-base-uncased tokenizer and writes the rows and the decoded texts.

    pip install transformers
    python3 scripts/reference_chunks_fixture.py --shared ../shared/data \
        --out crates/corpus/tests/fixtures/reference_chunks.json
"""
import argparse
import json
from itertools import chain
from pathlib import Path

import transformers
from transformers import BertTokenizerFast


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="../shared/data")
    ap.add_argument("--out", default="crates/corpus/tests/fixtures/reference_chunks.json")
    ap.add_argument("--rows", type=int, default=120)
    ap.add_argument("--group-rows", type=int, default=50)
    ap.add_argument("--t", type=int, nargs="+", default=[16, 64])
    args = ap.parse_args()
    shared = Path(args.shared)
    tok = BertTokenizerFast(
        vocab_file=str(shared / "bert-base-uncased/vocab.txt"),
        tokenizer_file=str(shared / "bert-base-uncased/bert_base_uncased.json"),
        do_lower_case=True,
    )
    # One row per line, empty lines kept, as `datasets` reads WikiText.
    text = (shared / "wikitext-2/test.txt").read_text(encoding="utf-8")
    rows = text.splitlines()[: args.rows]
    out = {
        "source": "wikitext-2/test.txt",
        "transformers": transformers.__version__,
        "group_rows": args.group_rows,
        "rows": rows,
        "chunks": {},
    }
    for t in args.t:
        texts = []
        for g in range(0, len(rows), args.group_rows):
            ids = list(chain(*tok(rows[g : g + args.group_rows])["input_ids"]))
            total = len(ids) // t * t if len(ids) >= t else len(ids)
            chunks = [ids[i : i + t] for i in range(0, total, t)]
            texts += tok.batch_decode(
                chunks, skip_special_tokens=True, clean_up_tokenization_spaces=True
            )
        out["chunks"][str(t)] = texts
    Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n")
    print(f"{args.out}: {len(rows)} rows, " + ", ".join(
        f"T={t}: {len(v)} chunks" for t, v in out["chunks"].items()))


if __name__ == "__main__":
    main()
