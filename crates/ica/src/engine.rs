//! The two products of one ICA step, `Y = W X` and `C = g(Y) Yᵀ / n`, on a chosen backend.
//!
//! Data are held component-major, `X` `[d, n]`, so that both products are long-`k` GEMMs
//! (`d×d·d×n` and `d×n·n×d`). The `d×d` update of `W` stays on the host (see `amari.rs`):
//! it costs `2d³` flops against the products' `4d²n`, and one host copy of `C` per step
//! lets the stopping rule look at it.

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::score::{score_slice, SQRT_2};

/// Which code multiplies the matrices of the ICA step.
///
/// Measured on the 2-core x86_64 CPU this project runs on (see `docs/ica.md`): a whole step
/// through candle's CPU tensors is 6–7× slower than the host path (candle's matmul
/// alone is within 2× of faer's either way, but its element-wise ops allocate a tensor each
/// and run a scalar `exp` on one thread), so on a CPU device `Auto` takes the host path
/// (faer GEMMs on cache-sized column blocks, fused with a SIMD score); on a GPU device
/// `Auto` runs the step as candle tensor operations on that device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Gemm {
    /// faer on a CPU device, candle on any other.
    #[default]
    Auto,
    /// Always faer on the host (the device is ignored).
    Faer,
    /// Always candle tensors on the given device.
    Candle,
}

/// A backend that, given `W`, returns `C = g(W X_b) (W X_b)ᵀ / |b|` for a batch `b` of columns.
pub(crate) trait Engine {
    /// `w` row-major `[d, d]`; `cols` = the batch's sample indices, or `None` for all samples.
    /// Returns `C` row-major `[d, d]`.
    fn moment(&mut self, w: &[f32], cols: Option<&[usize]>) -> Result<Vec<f32>>;
}

/// Builds the engine for `gemm` on `device` over `x` (`[d, n]` row-major).
pub(crate) fn make_engine(
    gemm: Gemm,
    device: &Device,
    x: Vec<f32>,
    d: usize,
    n: usize,
) -> Result<Box<dyn Engine>> {
    let use_faer = match gemm {
        Gemm::Auto => device.is_cpu(),
        Gemm::Faer => true,
        Gemm::Candle => false,
    };
    Ok(if use_faer {
        Box::new(FaerEngine::new(x, d, n))
    } else {
        Box::new(CandleEngine::new(&x, d, n, device)?)
    })
}

/// Columns per block of the host backend: a block's `X`, `Y` and `g(Y)` (`3·d·BLOCK` floats,
/// 384 KiB at d = 128) stay in a core's L2 cache between the two products.
const BLOCK: usize = 256;
/// Fixed number of partial sums of `C`: blocks are split into this many contiguous groups,
/// each summed in order, then the groups in order, so the result does not depend on how many
/// threads ran (the same seed gives the same `W`).
const GROUPS: usize = 16;

/// Host backend: the data cut into column blocks stored contiguously; for each block
/// `Y_b = W X_b` (faer), `G_b = g(Y_b)`, `C += G_b Y_bᵀ` (faer), blocks spread over rayon's
/// threads.
pub(crate) struct FaerEngine {
    /// `X` `[d, n]` row-major, for gathering minibatches.
    rows: Vec<f32>,
    /// `X` in block layout (see [`to_blocks`]).
    x: Vec<f32>,
    d: usize,
    n: usize,
    /// Minibatch columns gathered in block layout.
    batch: Vec<f32>,
}

impl FaerEngine {
    fn new(x: Vec<f32>, d: usize, n: usize) -> Self {
        let mut blocked = Vec::with_capacity(d * n);
        to_blocks(&x, d, n, None, &mut blocked);
        Self {
            rows: x,
            x: blocked,
            d,
            n,
            batch: Vec::new(),
        }
    }
}

/// Writes the columns `cols` (all when `None`) of row-major `x` `[d, n]` into `out` as
/// consecutive row-major `[d, w]` blocks of `w = BLOCK` columns (the last one narrower).
fn to_blocks(x: &[f32], d: usize, n: usize, cols: Option<&[usize]>, out: &mut Vec<f32>) {
    out.clear();
    let total = cols.map_or(n, <[usize]>::len);
    let mut start = 0;
    while start < total {
        let end = (start + BLOCK).min(total);
        for r in 0..d {
            let row = &x[r * n..(r + 1) * n];
            match cols {
                None => out.extend_from_slice(&row[start..end]),
                Some(idx) => out.extend(idx[start..end].iter().map(|&i| row[i])),
            }
        }
        start = end;
    }
}

/// `Σ_b g(W X_b) (W X_b)ᵀ` over the blocks of `data` (`cols` columns in block layout).
fn blocked_moment(w: &[f32], data: &[f32], d: usize, cols: usize) -> Vec<f32> {
    use faer::linalg::matmul::matmul;
    use faer::{Accum, MatMut, MatRef, Par};
    use rayon::prelude::*;

    let blocks = cols.div_ceil(BLOCK);
    let groups = GROUPS.min(blocks);
    let w_view = MatRef::from_row_major_slice(w, d, d);
    let partials: Vec<Vec<f32>> = (0..groups)
        .into_par_iter()
        .map(|group| {
            let mut c = vec![0.0f32; d * d];
            let mut y = vec![0.0f32; d * BLOCK];
            let mut g = vec![0.0f32; d * BLOCK];
            for block in group * blocks / groups..(group + 1) * blocks / groups {
                let start = block * BLOCK;
                let width = BLOCK.min(cols - start);
                let x_b = &data[d * start..d * (start + width)];
                let (y, g) = (&mut y[..d * width], &mut g[..d * width]);
                matmul(
                    MatMut::from_row_major_slice_mut(y, d, width),
                    Accum::Replace,
                    w_view,
                    MatRef::from_row_major_slice(x_b, d, width),
                    1.0f32,
                    Par::Seq,
                );
                score_slice(y, g);
                matmul(
                    MatMut::from_row_major_slice_mut(&mut c, d, d),
                    Accum::Add,
                    MatRef::from_row_major_slice(&*g, d, width),
                    MatRef::from_row_major_slice(&*y, d, width).transpose(),
                    1.0f32,
                    Par::Seq,
                );
            }
            c
        })
        .collect();
    let mut c = vec![0.0f32; d * d];
    for p in &partials {
        for (a, b) in c.iter_mut().zip(p) {
            *a += b;
        }
    }
    let inv = 1.0 / cols as f32;
    c.iter_mut().for_each(|v| *v *= inv);
    c
}

impl Engine for FaerEngine {
    fn moment(&mut self, w: &[f32], cols: Option<&[usize]>) -> Result<Vec<f32>> {
        Ok(match cols {
            None => blocked_moment(w, &self.x, self.d, self.n),
            Some(idx) => {
                let mut batch = std::mem::take(&mut self.batch);
                to_blocks(&self.rows, self.d, self.n, Some(idx), &mut batch);
                let c = blocked_moment(w, &batch, self.d, idx.len());
                self.batch = batch;
                c
            }
        })
    }
}

/// Device backend: the same step as candle tensor operations (GPU with the `cuda` feature).
pub(crate) struct CandleEngine {
    x: Tensor,
    d: usize,
    device: Device,
}

impl CandleEngine {
    fn new(x: &[f32], d: usize, n: usize, device: &Device) -> Result<Self> {
        Ok(Self {
            x: Tensor::from_slice(x, (d, n), device)?,
            d,
            device: device.clone(),
        })
    }
}

impl Engine for CandleEngine {
    fn moment(&mut self, w: &[f32], cols: Option<&[usize]>) -> Result<Vec<f32>> {
        let w = Tensor::from_slice(w, (self.d, self.d), &self.device)?;
        let x = match cols {
            None => self.x.clone(),
            Some(idx) => {
                let len = idx.len();
                let idx: Vec<u32> = idx.iter().map(|&i| i as u32).collect();
                let idx = Tensor::from_vec(idx, len, &self.device)?;
                self.x.index_select(&idx, 1)?
            }
        };
        let b = x.dim(1)?;
        let y = w.matmul(&x)?;
        // g(y) = ½ sgn(y) (1 − exp(−√2|y|))
        let g = (y
            .abs()?
            .affine(-f64::from(SQRT_2), 0.0)?
            .exp()?
            .affine(-0.5, 0.5)?
            * y.sign()?)?;
        let c = g.matmul(&y.t()?)?.affine(1.0 / b as f64, 0.0)?;
        Ok(c.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
    }
}
