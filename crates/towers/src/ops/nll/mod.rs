//! Fused linear cross-entropy on CPU: the mean NLL of `labels` under logits x·Wᵀ + b, computed
//! in passes of rows so that the [N, V] logits never exist at once, with the gradients for x, W
//! and b formed in the same pass (softmax − one-hot of each pass, then two GEMMs; dW summed in
//! fixed blocks of rows, so the pass size, which follows the threads, changes no bit). On the
//! paper's vocabularies the output layer is most of a training step; this replaces the ~dozen
//! full-size passes of the composed matmul/bias/log-softmax/gather graph and its [N, V]
//! allocations by one pass buffer, and runs every GEMM through faer on all cores.
//! Checked against the composed graph (values and gradients) in `loss.rs`.

/// The CUDA side of `softmax_nll` (`softmax_nll.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod softmax_nll;

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};
use faer::{Accum, MatMut, MatRef};

use kernels::host::{f32_data, not_host_f32, with_host_f32};
use kernels::nll_row;
use kernels::par::{for_each_chunk_mut, gemm, pieces, take, threads};

/// Whether the forward pass also forms the gradients (training) or only the loss (evaluation;
/// a later backward pass then recomputes them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NllPass {
    /// Loss and gradients in one pass.
    Train,
    /// Loss only.
    Eval,
}

/// The custom op: inputs x [N, E], W [V, E], b [V] (contiguous f32), output the scalar mean NLL.
pub(crate) struct LinearNll {
    labels: Vec<u32>,
    pass: NllPass,
    grads: Mutex<Option<(Tensor, Tensor, Tensor)>>,
}

impl LinearNll {
    pub(crate) fn new(labels: &[u32], pass: NllPass) -> Self {
        Self {
            labels: labels.to_vec(),
            pass,
            grads: Mutex::new(None),
        }
    }
}

/// Rows per accumulation block of dW: a ~16 MiB logits block, at least 16 rows. It depends on V
/// and N only (not on the threads or the pass), so the order in which dW sums its rows, and with
/// it every bit of a training, is the same on every machine.
fn block_rows(v: usize, n: usize) -> usize {
    ((1usize << 22) / v.max(1)).clamp(16, n.max(16))
}

/// Rows per pass: whole dW blocks, at least four and enough for 128 rows a thread, within a
/// ~128 MiB logits buffer where V allows. Each pass packs W once per thread for its logits and
/// dx products, so a pass of one block (137 rows at V 30,528) spent a fifth of a head step
/// packing W, and at 32 rows a thread it left all but four of 16 threads idle.
fn pass_rows(block: usize, v: usize, n: usize, threads: usize) -> usize {
    let want = (4 * block).max(128 * threads);
    let cap = ((1usize << 25) / v.max(1)).max(block);
    (want.min(cap) / block * block).clamp(block, n.max(block))
}
/// The passes of [`run_in`] over `n` rows, as (first row, rows): `pass` rows each, the last
/// the rest, and a last block of one row (`n` = 1 mod `block`) a pass of its own.
fn passes(n: usize, block: usize, pass: usize) -> impl Iterator<Item = (usize, usize)> {
    let end = n - usize::from(n % block == 1);
    let regular = (0..end)
        .step_by(pass)
        .map(move |r0| (r0, pass.min(end - r0)));
    regular.chain((end < n).then_some((end, 1)))
}

/// Borrowed inputs of one pass.
struct Inputs<'a> {
    x: &'a [f32],
    w: &'a [f32],
    b: &'a [f32],
    labels: &'a [u32],
    e: usize,
    v: usize,
}

/// Gradient buffers of one pass: dx [N, E], dw [V, E], db [V].
struct GradBufs {
    dx: Vec<f32>,
    dw: Vec<f32>,
    db: Vec<f32>,
}

/// Σ_i NLL_i, and the gradients of the mean when `want` (deterministic: fixed blocks and row
/// order, per-row results summed sequentially).
fn run(inp: &Inputs<'_>, want: bool) -> (f64, Option<GradBufs>) {
    let n = inp.labels.len();
    let block = block_rows(inp.v, n);
    run_in(inp, want, block, pass_rows(block, inp.v, n, threads()))
}

/// [`run`] in passes of `pass` rows (a multiple of `block`), dW summed block by block. The
/// logits and dx of a row do not depend on the rows beside it, so the pass size changes no bit,
/// with one exception that the passes keep: faer computes a product of one row another way
/// (as a matrix-vector product), so a last block of one row is a pass of its own, as it was
/// when every block was a pass.
fn run_in(inp: &Inputs<'_>, want: bool, block: usize, pass: usize) -> (f64, Option<GradBufs>) {
    let (n, e, v) = (inp.labels.len(), inp.e, inp.v);
    let scale = 1.0 / n as f32;
    let mut grads = want.then(|| GradBufs {
        dx: vec![0f32; n * e],
        dw: vec![0f32; v * e],
        db: vec![0f32; v],
    });
    let mut buf = vec![0f32; pass.min(n) * v];
    let mut nll = vec![0f32; n];
    let wt = MatRef::from_column_major_slice(inp.w, e, v);
    for (r0, rc) in passes(n, block, pass) {
        let xc = MatRef::from_row_major_slice(&inp.x[r0 * e..(r0 + rc) * e], rc, e);
        let logits = &mut buf[..rc * v];
        gemm(
            MatMut::from_row_major_slice_mut(logits, rc, v),
            Accum::Replace,
            xc,
            wt,
            1.0,
        );
        let part = rc.div_ceil(4 * threads());
        let outs = pieces(&mut nll[r0..r0 + rc], part);
        for_each_chunk_mut(logits, part * v, |p, rows| {
            let mut out = take(&outs[p]);
            let labels = &inp.labels[r0 + p * part..];
            for ((row, o), &label) in rows.chunks_exact_mut(v).zip(out.iter_mut()).zip(labels) {
                *o = nll_row(row, inp.b, label as usize, scale, want);
            }
        });
        let Some(g) = grads.as_mut() else { continue };
        for row in logits.chunks_exact(v) {
            for (d, &x) in g.db.iter_mut().zip(row) {
                *d += x;
            }
        }
        gemm(
            MatMut::from_row_major_slice_mut(&mut g.dx[r0 * e..(r0 + rc) * e], rc, e),
            Accum::Replace,
            MatRef::from_row_major_slice(logits, rc, v),
            MatRef::from_row_major_slice(inp.w, v, e),
            1.0,
        );
        for b0 in (0..rc).step_by(block) {
            let bc = block.min(rc - b0);
            gemm(
                MatMut::from_row_major_slice_mut(&mut g.dw, v, e),
                if r0 + b0 == 0 {
                    Accum::Replace
                } else {
                    Accum::Add
                },
                MatRef::from_row_major_slice(&logits[b0 * v..(b0 + bc) * v], bc, v).transpose(),
                xc.subrows(b0, bc),
                1.0,
            );
        }
    }
    (nll.iter().map(|&x| x as f64).sum(), grads)
}

impl LinearNll {
    fn inputs<'a>(
        &'a self,
        x: (&'a [f32], &Shape),
        w: (&'a [f32], &Shape),
        b: &'a [f32],
    ) -> candle_core::Result<Inputs<'a>> {
        let (n, e) = x.1.dims2()?;
        let (v, e2) = w.1.dims2()?;
        if e != e2 || b.len() != v || n != self.labels.len() || n == 0 {
            candle_core::bail!(
                "linear-nll: x {:?}, W {:?}, b [{}], {} labels",
                x.1,
                w.1,
                b.len(),
                self.labels.len()
            )
        }
        if let Some(&l) = self.labels.iter().find(|&&l| l as usize >= v) {
            candle_core::bail!("linear-nll: label {l} >= {v} classes")
        }
        Ok(Inputs {
            x: x.0,
            w: w.0,
            b,
            labels: &self.labels,
            e,
            v,
        })
    }

    fn grad_tensors(
        g: GradBufs,
        inp: &Inputs<'_>,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let dev = Device::Cpu;
        Ok((
            Tensor::from_vec(g.dx, (inp.labels.len(), inp.e), &dev)?,
            Tensor::from_vec(g.dw, (inp.v, inp.e), &dev)?,
            Tensor::from_vec(g.db, inp.v, &dev)?,
        ))
    }
}

impl CustomOp3 for LinearNll {
    fn name(&self) -> &'static str {
        "linear-nll"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let inp = self.inputs(
            (f32_data(s1, l1, "linear-nll")?, l1.shape()),
            (f32_data(s2, l2, "linear-nll")?, l2.shape()),
            f32_data(s3, l3, "linear-nll")?,
        )?;
        let (sum, grads) = run(&inp, self.pass == NllPass::Train);
        if let Some(g) = grads {
            let t = Self::grad_tensors(g, &inp)?;
            *self.grads.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        }
        let mean = (sum / inp.labels.len() as f64) as f32;
        Ok((CpuStorage::F32(vec![mean]), Shape::from(())))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let stored = self.grads.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (dx, dw, db) = match stored {
            Some(t) => t,
            None => with_host_f32(&[x, w, b], |s| -> candle_core::Result<_> {
                let inp = self.inputs((s[0], x.shape()), (s[1], w.shape()), s[2])?;
                let (_, g) = run(&inp, true);
                let g = g.ok_or_else(|| candle_core::Error::Msg("no gradients".into()))?;
                Self::grad_tensors(g, &inp)
            })
            .ok_or_else(|| not_host_f32("linear-nll"))??,
        };
        let g = grad_res.to_dtype(candle_core::DType::F32)?;
        Ok((
            Some(dx.broadcast_mul(&g)?),
            Some(dw.broadcast_mul(&g)?),
            Some(db.broadcast_mul(&g)?),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize, k: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (((i * k) % 1013) as f32 / 506.5 - 1.0) * 0.5)
            .collect()
    }

    #[test]
    fn passes_are_whole_blocks_within_the_buffer() {
        // The ELMo heads' shape: blocks of 137 rows, passes of four blocks on 1-2 threads, eight
        // (the 128 MiB buffer) on 16, one pass holding everything when N is smaller.
        let (v, n) = (30_528, 2048);
        let block = block_rows(v, n);
        assert_eq!(block, 137);
        assert_eq!(pass_rows(block, v, n, 1), 548);
        assert_eq!(pass_rows(block, v, n, 2), 548);
        assert_eq!(pass_rows(block, v, n, 16), 1096);
        assert_eq!(pass_rows(block, v, 300, 2), 300);
        // A vocabulary too large for four blocks in the buffer still takes one block a pass.
        let big = 1 << 24;
        assert_eq!(pass_rows(block_rows(big, n), big, n, 8), 16);
    }

    #[test]
    fn the_pass_size_changes_no_bit() {
        // E above a GEMM register tile, V not a multiple of 16; N ends in a block of 3 rows,
        // then of one row (which faer multiplies another way).
        let (e, v, block) = (40, 3001, 64);
        for n in [515, 513] {
            let (x, w, b) = (data(n * e, 7919), data(v * e, 104_729), data(v, 31));
            let labels: Vec<u32> = (0..n as u32).map(|i| (i * 331) % v as u32).collect();
            let inp = Inputs {
                x: &x,
                w: &w,
                b: &b,
                labels: &labels,
                e,
                v,
            };
            let bits = |p: usize| {
                let (sum, g) = run_in(&inp, true, block, p);
                let g = g.unwrap();
                let all: Vec<u32> = [g.dx, g.dw, g.db]
                    .concat()
                    .iter()
                    .map(|x| x.to_bits())
                    .collect();
                (sum.to_bits(), all)
            };
            let one_block = bits(block);
            for pass in [3 * block, 8 * block, n] {
                assert!(
                    bits(pass) == one_block,
                    "N {n}: pass {pass} differs from one block a pass"
                );
            }
            // The check can fail: another dW summation order moves some bits.
            assert!(bits_with_block(&inp, 32) != one_block.1);
        }
    }

    fn bits_with_block(inp: &Inputs<'_>, block: usize) -> Vec<u32> {
        let g = run_in(inp, true, block, block).1.unwrap();
        [g.dx, g.dw, g.db]
            .concat()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }
}
