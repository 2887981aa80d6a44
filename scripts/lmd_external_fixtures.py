#!/usr/bin/env python3
"""Writes the small torch.save fixtures of crates/lmd/tests/external.rs (a few KB in all).

Values are closed-form (value = 100 * model + 10 * row + col, or its negative), so the Rust
test checks them exactly without the fixture's data in the test.

  python3 scripts/lmd_external_fixtures.py --out crates/lmd/tests/fixtures/external
"""

import argparse
import collections
import os

import torch


def block(model, rows, cols, dtype):
    r = torch.arange(rows, dtype=torch.float64).unsqueeze(1)
    c = torch.arange(cols, dtype=torch.float64).unsqueeze(0)
    return (100.0 * model + 10.0 * r + c).to(dtype).contiguous()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    out = lambda name: os.path.join(args.out, name)
    split = {
        "train": {"alpha": block(1, 5, 3, torch.float32), "beta": block(2, 5, 2, torch.float64),
                  "gamma": block(3, 5, 4, torch.bfloat16)},
        "test": {"alpha": block(1, 4, 3, torch.float32), "beta": block(2, 4, 2, torch.float64),
                 "gamma": block(3, 4, 4, torch.bfloat16)},
    }
    # Layout 1: one file per split, dict model -> tensor.
    os.makedirs(out("per_split"), exist_ok=True)
    for s, d in split.items():
        torch.save(d, out(f"per_split/{s}.pt"))
    # Layout 2: the reference's embeddings.pt (a plain dict split -> dict model -> tensor).
    os.makedirs(out("nested"), exist_ok=True)
    torch.save({s: dict(d) for s, d in split.items()}, out("nested/embeddings.pt"))
    # What the reference's own code writes: a collections.defaultdict (not read: documented).
    dd = collections.defaultdict(dict)
    for s, d in split.items():
        dd[s].update(d)
    os.makedirs(out("defaultdict"), exist_ok=True)
    torch.save(dd, out("defaultdict/embeddings.pt"))
    # A transposed (Fortran-contiguous) f16 tensor, and the error cases.
    torch.save({"t": block(4, 3, 5, torch.float16).T}, out("transposed_f16.pt"))
    torch.save({"ints": torch.arange(6).reshape(2, 3)}, out("int64.pt"))
    torch.save({"cube": torch.zeros(2, 2, 2)}, out("three_d.pt"))
    nan = block(5, 3, 2, torch.float32)
    nan[2, 1] = float("nan")
    torch.save({"x": nan}, out("nan.pt"))
    # .npy as numpy writes it: f32 and f64 C order, and the refused variants.
    import numpy as np

    np.save(out("numpy_f32.npy"), block(6, 3, 4, torch.float32).numpy())
    np.save(out("numpy_f64.npy"), block(7, 2, 3, torch.float64).numpy())
    np.save(out("numpy_fortran.npy"), np.asfortranarray(block(8, 3, 4, torch.float32).numpy()))
    np.save(out("numpy_int32.npy"), np.arange(6, dtype=np.int32).reshape(2, 3))
    np.save(out("numpy_big_endian.npy"), block(9, 2, 2, torch.float32).numpy().astype(">f4"))


if __name__ == "__main__":
    main()
