//! A fused, CPU-only negative log-likelihood over logits [N, V] plus an output bias [V] (f32):
//! one pass for the log-sum-exp forward, one pass for the gradient softmax − one-hot backward
//! (the bias gradient is its column sum), instead of the dozen full-size passes of the composed
//! broadcast/log-softmax/gather graph. Rows are split over threads.
//! Checked against the composed version (values and gradients) in the tests.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

/// Per-row NLL −log softmax(x_i + b)[label_i] as a custom op with a backward pass.
pub(crate) struct FusedNll {
    pub(crate) labels: Vec<u32>,
}

fn n_threads(work: usize) -> usize {
    if work < 1 << 18 {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8)
    }
}

/// Row-wise (max, log Σ exp(x + b − max)) of x + b.
fn row_lse(row: &[f32], bias: &[f32]) -> (f32, f32) {
    let m = row
        .iter()
        .zip(bias)
        .fold(f32::NEG_INFINITY, |a, (&x, &b)| a.max(x + b));
    let s: f32 = row.iter().zip(bias).map(|(&x, &b)| (x + b - m).exp()).sum();
    (m, s.ln())
}

/// The contiguous f32 data of a CPU storage.
fn f32_slice<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else {
        candle_core::bail!("fused-nll expects f32 inputs")
    };
    let Some((a, b)) = l.contiguous_offsets() else {
        candle_core::bail!("fused-nll expects contiguous inputs")
    };
    Ok(&data[a..b])
}

/// Applies `f(row_index, row_in, row_out)` to every row, in parallel chunks.
fn par_rows<F>(x: &[f32], out: &mut [f32], v: usize, out_w: usize, f: F)
where
    F: Fn(usize, &[f32], &mut [f32]) + Sync,
{
    let n = x.len() / v;
    let k = n_threads(x.len());
    let per = n.div_ceil(k.max(1)).max(1);
    std::thread::scope(|s| {
        for (c, o) in out.chunks_mut(per * out_w).enumerate() {
            let f = &f;
            s.spawn(move || {
                for (r, orow) in o.chunks_mut(out_w).enumerate() {
                    let i = c * per + r;
                    f(i, &x[i * v..(i + 1) * v], orow);
                }
            });
        }
    });
}

impl CustomOp2 for FusedNll {
    fn name(&self) -> &'static str {
        "fused-nll"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, v) = l1.shape().dims2()?;
        let bias = f32_slice(s2, l2)?;
        if n != self.labels.len() || bias.len() != v {
            candle_core::bail!(
                "fused-nll: {n} rows, {} labels, {} biases for {v} classes",
                self.labels.len(),
                bias.len()
            )
        }
        let x = f32_slice(s1, l1)?;
        let mut out = vec![0f32; n];
        par_rows(x, &mut out, v, 1, |i, row, o| {
            let (m, lse) = row_lse(row, bias);
            let l = self.labels[i] as usize;
            o[0] = m + lse - (row[l] + bias[l]);
        });
        Ok((CpuStorage::F32(out), Shape::from(n)))
    }

    fn bwd(
        &self,
        arg1: &Tensor,
        arg2: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (n, v) = arg1.dims2()?;
        let x: Vec<f32> = arg1.flatten_all()?.to_vec1()?;
        let bias: Vec<f32> = arg2.to_vec1()?;
        let g: Vec<f32> = grad_res.to_dtype(candle_core::DType::F32)?.to_vec1()?;
        let mut out = vec![0f32; n * v];
        par_rows(&x, &mut out, v, v, |i, row, o| {
            let (m, lse) = row_lse(row, &bias);
            let shift = m + lse;
            for ((oj, &xj), &bj) in o.iter_mut().zip(row).zip(&bias) {
                *oj = g[i] * (xj + bj - shift).exp();
            }
            o[self.labels[i] as usize] -= g[i];
        });
        let mut gb = vec![0f32; v];
        for row in out.chunks(v) {
            for (a, &b) in gb.iter_mut().zip(row) {
                *a += b;
            }
        }
        Ok((
            Some(Tensor::from_vec(out, (n, v), arg1.device())?),
            Some(Tensor::from_vec(gb, v, arg2.device())?),
        ))
    }
}
