#!/usr/bin/env python3
"""Run the reference LMD implementation (haozhg/lmd) on embeddings in our external format.

Two jobs, both optional and combinable:

* ``--generate``: write synthetic embeddings with a planted linear structure
  (u_i = A_i s + sigma_i * eps_i + c_i, one shared latent s) for ``--models`` models of width
  ``--dim`` into ``--embeddings`` in the layout ``lmd::external`` reads:
  ``<dir>/train.pt`` and ``<dir>/test.pt``, each a ``torch.save`` dict model name -> [n, d]
  tensor (the per-split dict the reference's ``embeddings.pt`` holds under its split keys), and
  with ``--npy`` also ``<dir>/<model>/<split>.npy``.
* ``--out``: load ``<dir>/<split>.pt``, run the reference's ``LanguageModelDecomposition``
  class (``lmd/cli.py``: ``torch.cov``, ridge ``alpha`` on the centred covariance, intercept,
  pooled R^2 about the scored split's mean) for every group fit (one model on all others) and
  every ordered pair, fit on train, scored on test, and write the numbers (and the seconds the
  fit/score loop took) to JSON.

The reference is imported from the path given by ``--reference`` (a clone of
https://github.com/haozhg/lmd); nothing of it is copied. Its ``cli.py`` imports pandas,
transformers, datasets and tqdm at module level although the LMD class uses none of them: while
it is imported, empty stand-in modules take their place (installed or not).

Example (parity fixture, a few seconds):
  python3 scripts/lmd_reference_parity.py --reference /tmp/lmd --embeddings /tmp/lmd_emb \
      --generate --models 6 --dim 64 --n-train 4000 --n-test 1000 --out /tmp/lmd_emb/reference.json
"""

import argparse
import importlib
import json
import os
import sys
import time
import types


class _Anything:
    """Stands in for any name the reference imports but the LMD class never uses."""

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Anything()

    def __getattr__(self, _):
        return _Anything()


def _stub_module(name):
    def attr(a):
        # Dunder lookups (__file__, __path__ ...) must fail as for a real module: inspect and
        # importlib walk sys.modules and read them.
        if a.startswith("__"):
            raise AttributeError(a)
        return _Anything()

    mod = types.ModuleType(name)
    mod.__getattr__ = attr
    return mod


STUBBED = ["pandas", "transformers", "datasets", "tqdm"]


def import_reference(path):
    """Imports lmd/cli.py from the clone with its unused imports stubbed for the duration of the
    import (installed or not: importing the real transformers is slow and version-fragile)."""
    saved = {n: sys.modules.get(n) for n in STUBBED}
    for n in STUBBED:
        sys.modules[n] = _stub_module(n)
    sys.path.insert(0, os.path.abspath(path))
    try:
        cli = importlib.import_module("lmd.cli")
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    return cli, STUBBED


def generate(args, torch):
    g = torch.Generator().manual_seed(args.seed)
    names = [f"m{i:02d}" for i in range(args.models)]
    k = args.latent
    mixing = [torch.randn(args.dim, k, generator=g, dtype=torch.float64) / k**0.5 for _ in names]
    # Noise from 0.3 to 1.0 across models, offsets of order 10 (a large common offset is what a
    # non-centred or single-pass f32 covariance gets wrong).
    sigma = [0.3 + 0.7 * i / max(1, args.models - 1) for i in range(args.models)]
    offset = [10.0 * torch.randn(args.dim, generator=g, dtype=torch.float64) for _ in names]
    out = {}
    for split, n in (("train", args.n_train), ("test", args.n_test)):
        s = torch.randn(n, k, generator=g, dtype=torch.float64)
        out[split] = {}
        for i, name in enumerate(names):
            eps = torch.randn(n, args.dim, generator=g, dtype=torch.float64)
            u = s @ mixing[i].T + sigma[i] * eps + offset[i]
            out[split][name] = u.to(torch.float32).contiguous()
    os.makedirs(args.embeddings, exist_ok=True)
    for split, d in out.items():
        torch.save(d, os.path.join(args.embeddings, f"{split}.pt"))
        if args.npy:
            import numpy as np

            for name, t in d.items():
                os.makedirs(os.path.join(args.embeddings, name), exist_ok=True)
                np.save(os.path.join(args.embeddings, name, f"{split}.npy"), t.numpy())
    return names


def run_reference(args, torch, cli):
    dtype = {"float32": torch.float32, "float64": torch.float64}[args.dtype]
    emb = {}
    for split in ("train", "test"):
        d = torch.load(os.path.join(args.embeddings, f"{split}.pt"))
        emb[split] = {k: v.to(dtype) for k, v in d.items()}
    names = sorted(emb["train"])
    LMD = cli.LanguageModelDecomposition
    t0 = time.perf_counter()
    group = {}
    for target in names:
        basis = [m for m in names if m != target]
        f = LMD(basis, target, alpha=args.alpha)
        f.train(emb["train"])
        group[target] = f.score(emb["test"])
    t1 = time.perf_counter()
    pair = [[1.0] * len(names) for _ in names]
    if not args.skip_pairwise:
        for i, target in enumerate(names):
            for j, basis in enumerate(names):
                if i == j:
                    continue
                f = LMD(basis, target, alpha=args.alpha)
                f.train(emb["train"])
                pair[i][j] = f.score(emb["test"])
    t2 = time.perf_counter()
    rho = [[(pair[i][j] + pair[j][i]) / 2 for j in range(len(names))] for i in range(len(names))]
    return {
        "reference": "haozhg/lmd lmd/cli.py LanguageModelDecomposition",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "dtype": args.dtype,
        "alpha": args.alpha,
        "models": names,
        "n_train": int(emb["train"][names[0]].shape[0]),
        "n_test": int(emb["test"][names[0]].shape[0]),
        "widths": [int(emb["train"][m].shape[1]) for m in names],
        "orientation": "pairwise_r2[target][basis]",
        "pairwise_r2": pair,
        "pairwise_rho": rho,
        "group_r2": [group[m] for m in names],
        "group_rho": sum(group.values()) / len(names),
        "seconds": {"group": t1 - t0, "pairwise": t2 - t1, "total": t2 - t0},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", help="path to a clone of github.com/haozhg/lmd")
    p.add_argument("--embeddings", required=True, help="folder of <split>.pt files")
    p.add_argument("--generate", action="store_true", help="write synthetic embeddings first")
    p.add_argument("--npy", action="store_true", help="with --generate: also <model>/<split>.npy")
    p.add_argument("--models", type=int, default=6)
    p.add_argument("--dim", type=int, default=64, help="width of every model (the reference needs equal widths)")
    p.add_argument("--latent", type=int, default=32, help="shared latent dimension k")
    p.add_argument("--n-train", type=int, default=4000)
    p.add_argument("--n-test", type=int, default=1000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", help="write the reference's numbers to this JSON file")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="dtype the reference computes in (the files stay float32)")
    p.add_argument("--alpha", type=float, default=1e-6, help="the reference's ridge (its default)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--skip-pairwise", action="store_true")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    if args.generate:
        names = generate(args, torch)
        print(f"wrote {len(names)} models x {args.dim} to {args.embeddings}", file=sys.stderr)
    if args.out:
        if not args.reference:
            p.error("--out needs --reference")
        cli, stubbed = import_reference(args.reference)
        result = run_reference(args, torch, cli)
        result["stubbed_imports"] = stubbed
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps({"group_rho": result["group_rho"], "seconds": result["seconds"]}))


if __name__ == "__main__":
    main()
