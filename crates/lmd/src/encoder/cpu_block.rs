//! The post-LayerNorm block fused for f32 inference on the CPU.
//!
//! candle runs the block as ~20 separate ops, each a pass over memory with a fresh buffer, and
//! its 4-D attention matmul loops one small GEMM per (sequence, head) with its own threading.
//! Here the block reads the weights in place and runs: one GEMM for Q, K and V together (bias
//! pre-filled, accumulated onto), attention per (sequence, head) on strided views of that
//! buffer (QKᵀ, mask + softmax row by row, ·V written straight into the context rows), the
//! output projection, residual + LayerNorm in one pass, the feed-forward with a vectorised
//! exact GELU, and a second residual + LayerNorm. GEMMs go through faer; GEMMs, row passes and
//! attention run on candle's own worker pool ([`kernels::par`]).

use faer::{Accum, MatMut, MatRef, Par};
use kernels::par::{for_each_chunk_mut, for_each_part, gemm, threads};

/// The additive attention bias [nb, 1, lb, L] with nb ∈ {1, n} and lb ∈ {1, L}, read in place.
#[derive(Clone, Copy)]
pub(crate) struct BiasView<'a> {
    /// Contiguous data.
    pub data: &'a [f32],
    /// Elements between sequences (0 when shared).
    pub seq_stride: usize,
    /// Elements between query rows (0 when one row serves all queries).
    pub row_stride: usize,
}

impl BiasView<'_> {
    fn row(&self, seq: usize, query: usize, l: usize) -> &[f32] {
        let o = seq * self.seq_stride + query * self.row_stride;
        &self.data[o..o + l]
    }
}

/// The strides of a bias of shape `dims` for n sequences of length l, if it has the supported
/// broadcast pattern.
pub(crate) fn bias_strides(dims: &[usize], n: usize, l: usize) -> Option<(usize, usize)> {
    match *dims {
        [nb, 1, lb, lk] if lk == l && (nb == 1 || nb == n) && (lb == 1 || lb == l) => Some((
            if nb == 1 { 0 } else { lb * l },
            if lb == 1 { 0 } else { l },
        )),
        _ => None,
    }
}

/// One block's weights as host slices (Linear weights [out, in] as stored).
pub(crate) struct BlockWeights<'a> {
    pub qkv_w: &'a [f32],
    pub qkv_b: &'a [f32],
    pub o_w: &'a [f32],
    pub o_b: &'a [f32],
    pub ln1_g: &'a [f32],
    pub ln1_b: &'a [f32],
    pub ff_in_w: &'a [f32],
    pub ff_in_b: &'a [f32],
    pub ff_out_w: &'a [f32],
    pub ff_out_b: &'a [f32],
    pub ln2_g: &'a [f32],
    pub ln2_b: &'a [f32],
    pub eps1: f32,
    pub eps2: f32,
    pub heads: usize,
}

/// `x·Wᵀ (+ b)` for row-major x [rows, k] and W [out, k]. With a bias, the bias fills the
/// output and the GEMM accumulates onto it; without, the caller fuses the bias into its next
/// pass.
fn linear(x: &[f32], rows: usize, w: &[f32], out: usize, b: Option<&[f32]>) -> Vec<f32> {
    let k = x.len() / rows.max(1);
    let (mut y, accum) = match b {
        Some(b) => (b.repeat(rows), Accum::Add),
        None => (vec![0f32; rows * out], Accum::Replace),
    };
    let xm = MatRef::from_row_major_slice(x, rows, k);
    let wm = MatRef::from_row_major_slice(w, out, k);
    let ym = MatMut::from_row_major_slice_mut(&mut y, rows, out);
    gemm(ym, accum, xm, wm.transpose(), 1.0);
    y
}

/// Runs `f(rows_chunk)` on consecutive groups of whole rows, one group per thread.
fn par_rows(data: &mut [f32], width: usize, f: impl Fn(&mut [f32]) + Sync) {
    par_rows_with(data, &[], width, |c, _| f(c));
}

/// [`par_rows`] over `data` with the matching rows of `other` (same width, or empty).
fn par_rows_with(
    data: &mut [f32],
    other: &[f32],
    width: usize,
    f: impl Fn(&mut [f32], &[f32]) + Sync,
) {
    let rows = data.len() / width.max(1);
    let per = rows.div_ceil(threads()).max(1) * width;
    for_each_chunk_mut(data, per, |p, c| {
        let o = other.get(p * per..p * per + c.len()).unwrap_or(&[]);
        f(c, o)
    });
}

/// A pointer shared by the attention tasks, each writing its own (sequence, head) columns.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: tasks write disjoint elements (distinct sequence rows or head columns).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The pointer (a method, so closures capture the whole `Sync` wrapper).
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

/// Multi-head attention on a fused projection `qkv` [n·l, 3H] (Q | K | V per row) with an
/// additive bias; returns the context [n·l, H].
fn attention(qkv: &[f32], n: usize, l: usize, heads: usize, bias: BiasView) -> Vec<f32> {
    let h3 = qkv.len() / (n * l);
    let h = h3 / 3;
    let d = h / heads;
    let scale = 1.0 / (d as f32).sqrt();
    let mut ctx = vec![0f32; n * l * h];
    let out = SharedOut(ctx.as_mut_ptr());
    for_each_part(n * heads, |task| {
        let mut scores = vec![0f32; l * l];
        let (seq, head) = (task / heads, task % heads);
        let base = seq * l * h3 + head * d;
        let q = MatRef::from_row_major_slice_with_stride(&qkv[base..], l, d, h3);
        let k = MatRef::from_row_major_slice_with_stride(&qkv[base + h..], l, d, h3);
        let v = MatRef::from_row_major_slice_with_stride(&qkv[base + 2 * h..], l, d, h3);
        let sm = MatMut::from_row_major_slice_mut(&mut scores[..], l, l);
        faer::linalg::matmul::matmul(sm, Accum::Replace, q, k.transpose(), 1.0, Par::Seq);
        for (i, row) in scores.chunks_exact_mut(l).enumerate() {
            kernels::softmax_row(row, bias.row(seq, i, l), scale);
        }
        let p = MatRef::from_row_major_slice(&scores[..], l, l);
        // SAFETY: rows seq·l .. seq·l + l, columns head·d .. head·d + d of the [n·l, h] buffer
        // `ctx` (alive for the call): in bounds and written by this task only.
        let c = unsafe {
            MatMut::from_raw_parts_mut(out.ptr().add(seq * l * h + head * d), l, d, h as isize, 1)
        };
        faer::linalg::matmul::matmul(c, Accum::Replace, p, v, 1.0, Par::Seq);
    });
    ctx
}

/// One post-LN block on x [n·l, H] (row-major): LN(x + Attn(x)), then LN(· + W2 gelu(W1 ·)).
pub(crate) fn post_ln_block(
    x: &[f32],
    n: usize,
    l: usize,
    bias: BiasView,
    w: &BlockWeights,
) -> Vec<f32> {
    let rows = n * l;
    let hidden = w.ln1_g.len();
    let qkv = linear(x, rows, w.qkv_w, w.qkv_b.len(), Some(w.qkv_b));
    let ctx = attention(&qkv, n, l, w.heads, bias);
    drop(qkv);
    let mut a = linear(&ctx, rows, w.o_w, hidden, None);
    drop(ctx);
    par_rows_with(&mut a, x, hidden, |rows_a, rows_x| {
        kernels::residual_layer_norm(rows_a, w.o_b, rows_x, w.ln1_g, w.ln1_b, w.eps1)
    });
    let ffn = w.ff_in_b.len();
    let mut f = linear(&a, rows, w.ff_in_w, ffn, None);
    par_rows(&mut f, ffn, |r| kernels::bias_gelu_rows(r, w.ff_in_b));
    let mut y = linear(&f, rows, w.ff_out_w, hidden, None);
    drop(f);
    par_rows_with(&mut y, &a, hidden, |rows_y, rows_a| {
        kernels::residual_layer_norm(rows_y, w.ff_out_b, rows_a, w.ln2_g, w.ln2_b, w.eps2)
    });
    y
}
