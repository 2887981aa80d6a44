#!/usr/bin/env python3
"""Writes the fixtures of crates/lmd/tests/similarity.rs: planted arrays and every similarity
measure computed on them by NumPy alone (f64), independently of the Rust code's formulas.

The Rust side streams the arrays into moments (chunk by chunk, about a shift) and computes each
measure from moments; here each one is computed from the arrays themselves by the textbook
route: linear CKA from centred Grams; debiased CKA from the n x n kernel matrices with their
diagonals removed (the unbiased HSIC of Song et al. 2012, on the raw, uncentred arrays: the
estimator is shift-invariant); mean CCA and SVCCA from the singular values of Q_x^T Q_y of thin
QR factors (Bjorck-Golub), SVCCA after projecting on the top-k eigenvectors of each model's
covariance; the Procrustes distance from the nuclear norm of X^T Y of centred, unit-Frobenius
arrays; mutual k-NN from sorted cosine similarities of the centred rows.

With the large common offset (1e6 added to every entry) the kernel matrices of the raw arrays
would lose every digit (entries ~1e12 d); there the arrays are centred first (the same value in
exact arithmetic) and the case checks the Rust side's accumulation about a shift.

  pip install numpy
  python3 scripts/similarity_fixtures.py --out crates/lmd/tests/fixtures/similarity
"""

import argparse
import json
import os
import struct

import numpy as np


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr, dtype="<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def centred(x):
    return x - x.mean(axis=0, keepdims=True)


def linear_cka(x, y):
    x, y = centred(x), centred(y)
    return np.linalg.norm(x.T @ y) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y))


def hsic_unbiased(k, l):
    n = k.shape[0]
    k, l = k.copy(), l.copy()
    np.fill_diagonal(k, 0.0)
    np.fill_diagonal(l, 0.0)
    one = np.ones(n)
    return (np.trace(k @ l) + (one @ k @ one) * (one @ l @ one) / ((n - 1) * (n - 2))
            - 2.0 / (n - 2) * (one @ k @ l @ one)) / (n * (n - 3))


def debiased_cka(x, y):
    k, l = x @ x.T, y @ y.T
    return hsic_unbiased(k, l) / np.sqrt(hsic_unbiased(k, k) * hsic_unbiased(l, l))


def canonical(x, y):
    qx, _ = np.linalg.qr(centred(x))
    qy, _ = np.linalg.qr(centred(y))
    return np.linalg.svd(qx.T @ qy, compute_uv=False)


def mean_cca(x, y):
    return canonical(x, y).mean()


def svcca(x, y, k):
    def top(a):
        a = centred(a)
        w, v = np.linalg.eigh(a.T @ a / a.shape[0])
        return a @ v[:, ::-1][:, :k]
    return canonical(top(x), top(y))[:k].mean()


def procrustes(x, y):
    x, y = centred(x), centred(y)
    x, y = x / np.linalg.norm(x), y / np.linalg.norm(y)
    return 2.0 - 2.0 * np.linalg.svd(x.T @ y, compute_uv=False).sum()


def knn_lists(x, k):
    x = centred(x)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    s = x @ x.T
    n = s.shape[0]
    out = []
    for r in range(n):
        cand = [c for c in range(n) if c != r]
        cand.sort(key=lambda c: (-s[r, c], c))
        out.append(set(cand[:k]))
    return out


def mutual_knn(x, y, k):
    a, b = knn_lists(x, k), knn_lists(y, k)
    return np.mean([len(p & q) / k for p, q in zip(a, b)])


def planted(rng, n, widths):
    latent = rng.standard_normal((n, 3))
    blocks = []
    for i, w in enumerate(widths):
        a = rng.standard_normal((3, w))
        noise = (0.3 + 0.2 * i) * rng.standard_normal((n, w))
        blocks.append(latent @ a + noise + 3.0 + 0.5 * i)
    return blocks


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    widths, n, svcca_k, knn_k = [4, 3, 5], 40, 2, 3
    rng = np.random.default_rng(71)
    base = planted(rng, n, widths)
    for case, offset in [("planted", 0.0), ("offset", 1e6)]:
        blocks = [b + offset for b in base]
        # The reference's own arithmetic: raw arrays without an offset, centred ones with it.
        ref = blocks if offset == 0.0 else [centred(b) for b in blocks]
        m = len(widths)
        out = {name: np.eye(m) for name in
               ["linear_cka", "debiased_cka", "mean_cca", "svcca", "mutual_knn"]}
        out["procrustes"] = np.zeros((m, m))
        for i in range(m):
            for j in range(m):
                if i == j:
                    continue
                x, y = ref[i], ref[j]
                out["linear_cka"][i, j] = linear_cka(x, y)
                out["debiased_cka"][i, j] = debiased_cka(x, y)
                out["mean_cca"][i, j] = mean_cca(x, y)
                out["svcca"][i, j] = svcca(x, y, svcca_k)
                out["procrustes"][i, j] = procrustes(x, y)
                out["mutual_knn"][i, j] = mutual_knn(x, y, knn_k)
        tensors = {"x": np.concatenate(blocks, axis=1)}
        tensors.update(out)
        meta = {"widths": json.dumps(widths), "svcca_dims": svcca_k, "knn_k": knn_k,
                "offset": offset, "numpy": np.__version__}
        write_safetensors(os.path.join(args.out, f"{case}.safetensors"), tensors, meta)
        print(case, {k: float(v[1, 0]) for k, v in out.items()})


if __name__ == "__main__":
    main()
