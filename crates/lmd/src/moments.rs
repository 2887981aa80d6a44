//! Streaming joint first and second moments of the stacked embeddings of M models.
//!
//! One [`Moments`] per split holds everything the closed-form decomposition needs: the count n,
//! the mean and the Gram matrix of z = [u_1; …; u_M] (D = Σ d_i). Batches arrive as f32 and are
//! accumulated in f64 about a fixed shift (the first batch's mean), so the covariance
//! G/n − m mᵀ (m = mean − shift) does not cancel catastrophically when the embeddings have a
//! large common offset. Only the lower triangle of the Gram matrix is accumulated (half the
//! flops of a full product); readers mirror it.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use candle_core::{DType, Tensor};
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::prelude::ReborrowMut;
use faer::{Accum, Mat, MatRef};
use safetensors::{Dtype, SafeTensors};

use crate::error::{LmdError, Result};
use crate::similarity::stream::{NormMoments, Streams};

/// The key of the JSON metadata inside a saved moments file's safetensors header.
const META_KEY: &str = "lmd.moments";
/// Format tag written into the metadata (bumped if the layout ever changes).
const FORMAT: &str = "lmd-moments-v1";
/// Upper bound on the f64 staging buffer of one Gram update (bytes): big enough for efficient
/// GEMM panels, small enough not to matter beside the D × D accumulator.
const STAGING_BYTES: usize = 64 << 20;

/// How [`Moments::update_stacked_f64_in_place`] forms each chunk's Gram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Accumulation {
    /// The shifted rows' products in f64 (faer's triangular f64 product): exact to f64
    /// rounding. The default.
    #[default]
    F64,
    /// The shifted rows rounded to f32, their products formed by faer's f32 GEMM over at most
    /// [`F32_PRODUCT_ROWS`] rows at a time, each such product added into the f64 accumulator.
    /// Every Gram entry then differs from the f64 one by at most
    /// [`f32_product_bound`]`(k)` · Σ_rows |x_i||x_j| (x the shifted values, k the rows per
    /// product): the error does not grow with n, only with k.
    F32Products,
}

/// Most rows whose f32 products are summed in f32 before they reach the f64 accumulator.
pub const F32_PRODUCT_ROWS: usize = 1024;

/// The relative bound of [`Accumulation::F32Products`] for products over `k` rows: each
/// shifted value is rounded once to f32 (relative error ≤ u = 2⁻²⁴), and a dot product of k
/// terms in f32, in any order, with or without FMA, errs by at most γ_k = k u / (1 − k u) of
/// the sum of the absolute products; together |Ĝ_ij − G_ij| ≤ ((1 + u)² (1 + γ_k) − 1) ·
/// Σ |x_i||x_j|, which this returns (≈ (k + 2) u; 6.1·10⁻⁵ at k = 1024). The f64 sums across
/// products add a term of order n·2⁻⁵³, negligible beside it.
pub fn f32_product_bound(k: usize) -> f64 {
    let u = f32::EPSILON as f64 / 2.0;
    let ku = k as f64 * u;
    let gamma = ku / (1.0 - ku);
    (1.0 + u) * (1.0 + u) * (1.0 + gamma) - 1.0
}

/// Columns of one f32 product block (its scratch is D × this, f32).
const F32_BLOCK_COLS: usize = 512;

/// Streaming, mergeable first and second moments of M models' embeddings, in f64.
///
/// Rows are samples; each model i contributes a block of width `widths[i]`; blocks are stacked in
/// the order of `names`. Build with [`Moments::new`], feed with [`Moments::update`] (one
/// row-major block per model), [`Moments::update_stacked`] (one row-major [n, D] slice) or
/// [`Moments::update_tensor`] (a [n, D] candle tensor on any device: the Gram is computed there),
/// combine shards with [`Moments::merge`], persist with [`Moments::save`] / [`Moments::load`].
#[derive(Clone, Debug)]
pub struct Moments {
    names: Vec<String>,
    widths: Vec<usize>,
    offsets: Vec<usize>,
    n: u64,
    /// The shift c subtracted from every row; `None` until the first batch.
    shift: Option<Vec<f64>>,
    /// Σ (z − c).
    sum: Vec<f64>,
    /// Σ (z − c)(z − c)ᵀ, lower triangle (including the diagonal) valid.
    gram: Mat<f64>,
    /// How [`Moments::update_stacked_f64_in_place`] forms products.
    accumulation: Accumulation,
    /// The similarity measures' accumulators ([`Moments::track_similarity`]), if tracked.
    streams: Option<Box<Streams>>,
}

impl Moments {
    /// Empty moments for the models `names` with embedding widths `widths` (same length, every
    /// width > 0, names distinct).
    pub fn new(names: Vec<String>, widths: Vec<usize>) -> Result<Self> {
        if names.is_empty() || names.len() != widths.len() {
            return Err(LmdError::InvalidArgument(format!(
                "Moments::new needs one width per model and at least one model ({} names, {} widths)",
                names.len(),
                widths.len()
            )));
        }
        for (i, (name, &w)) in names.iter().zip(&widths).enumerate() {
            if w == 0 {
                return Err(LmdError::InvalidArgument(format!(
                    "model {name} has width 0"
                )));
            }
            if names[..i].contains(name) {
                return Err(LmdError::InvalidArgument(format!(
                    "model name {name} appears twice"
                )));
            }
        }
        let mut offsets = Vec::with_capacity(widths.len() + 1);
        offsets.push(0);
        for &w in &widths {
            offsets.push(offsets.last().copied().unwrap_or(0) + w);
        }
        let d = offsets[widths.len()];
        Ok(Self {
            names,
            widths,
            offsets,
            n: 0,
            shift: None,
            sum: vec![0.0; d],
            gram: Mat::zeros(d, d),
            accumulation: Accumulation::F64,
            streams: None,
        })
    }

    /// Accumulates, in the same pass, what [`crate::similarity`] needs beside the moments: the
    /// per-row norm moments (Q, M × M; V, M × D) and the joint and norm moments of the same rows
    /// with the pairing of sequences broken inside each update by a seeded derangement (the
    /// null; see [`crate::similarity::stream`]). `first_row` is the global index of the first
    /// row these moments will hold (0 for a whole split, a shard's first row for a shard), so
    /// that merged shards equal one pass cut into the same chunks. Memory: a second D × D Gram
    /// plus 2 (M² + M·D + D) f64. Only on empty moments.
    pub fn track_similarity(&mut self, seed: u64, first_row: u64) -> Result<()> {
        if self.n > 0 {
            return Err(LmdError::InvalidArgument(format!(
                "similarity accumulators must be tracked from the first row ({} rows already)",
                self.n
            )));
        }
        let streams = Streams::new(self.names.clone(), self.widths.clone(), seed, first_row)?;
        self.streams = Some(Box::new(streams));
        Ok(())
    }

    /// Whether the similarity accumulators are tracked, and with which (seed, first row).
    pub fn similarity_tracking(&self) -> Option<(u64, u64)> {
        self.streams.as_ref().map(|s| (s.seed, s.first_row))
    }

    /// The joint moments of the rows with the pairing of sequences broken (the null of every
    /// similarity measure), when tracked.
    pub fn null(&self) -> Option<&Moments> {
        self.streams.as_ref().map(|s| &s.null)
    }

    /// The similarity accumulators, when tracked.
    pub(crate) fn streams(&self) -> Option<&Streams> {
        self.streams.as_deref()
    }

    /// Σ (z − c) (the shifted sum).
    pub(crate) fn sum_ref(&self) -> &[f64] {
        &self.sum
    }

    /// Σ (z − c)(z − c)ᵀ, lower triangle valid.
    pub(crate) fn gram_ref(&self) -> &Mat<f64> {
        &self.gram
    }

    /// Feeds one chunk of raw rows (row-major, finite) to the similarity accumulators.
    fn feed_streams(&mut self, raw: &[f64], n_before: u64) -> Result<()> {
        let (Some(st), Some(shift)) = (self.streams.as_mut(), self.shift.as_deref()) else {
            return Ok(());
        };
        st.update(raw, shift, &self.offsets, n_before)
    }

    /// Moments of `n` samples with the given mean and population covariance (D × D, symmetric,
    /// divided by n): for covariances computed elsewhere or known in closed form.
    pub fn from_parts(
        names: Vec<String>,
        widths: Vec<usize>,
        n: u64,
        mean: Vec<f64>,
        cov: &Mat<f64>,
    ) -> Result<Self> {
        let mut m = Self::new(names, widths)?;
        let d = m.dim();
        if mean.len() != d || cov.nrows() != d || cov.ncols() != d {
            return Err(LmdError::WidthMismatch {
                what: "mean/covariance of from_parts".into(),
                expected: d,
                got: mean.len().max(cov.nrows()).max(cov.ncols()),
            });
        }
        for c in 0..d {
            for r in c..d {
                let (a, b) = (cov[(r, c)], cov[(c, r)]);
                if !a.is_finite()
                    || (a - b).abs() > 1e-12 * (a.abs() + b.abs()).max(f64::MIN_POSITIVE)
                {
                    return Err(LmdError::InvalidArgument(format!(
                        "covariance must be finite and symmetric (entry ({r}, {c}))"
                    )));
                }
                m.gram[(r, c)] = n as f64 * a;
            }
        }
        if mean.iter().any(|x| !x.is_finite()) {
            return Err(LmdError::InvalidArgument("non-finite mean".into()));
        }
        m.shift = Some(mean);
        m.n = n;
        Ok(m)
    }

    /// Chooses how [`Moments::update_stacked_f64_in_place`] forms each chunk's products
    /// (the other updates always use f64). Not saved with the moments.
    pub fn set_accumulation(&mut self, accumulation: Accumulation) {
        self.accumulation = accumulation;
    }

    /// How [`Moments::update_stacked_f64_in_place`] forms products.
    pub fn accumulation(&self) -> Accumulation {
        self.accumulation
    }

    /// Model names, in stacking order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Embedding width of every model.
    pub fn widths(&self) -> &[usize] {
        &self.widths
    }

    /// Total width D = Σ d_i.
    pub fn dim(&self) -> usize {
        self.offsets[self.widths.len()]
    }

    /// Number of samples accumulated.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// The shift subtracted before accumulation (zeros before the first batch).
    pub fn shift(&self) -> Vec<f64> {
        self.shift.clone().unwrap_or_else(|| vec![0.0; self.dim()])
    }

    /// Index of a model by name.
    pub fn index_of(&self, name: &str) -> Result<usize> {
        self.names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| LmdError::UnknownModel {
                name: name.to_string(),
                known: self.names.clone(),
            })
    }

    /// Column range of model `i` inside the stacked vector z.
    pub fn range(&self, i: usize) -> Range<usize> {
        self.offsets[i]..self.offsets[i + 1]
    }

    /// Indices of the named models (repeats allowed; unknown names are an error).
    pub fn indices(&self, names: &[&str]) -> Result<Vec<usize>> {
        names.iter().map(|n| self.index_of(n)).collect()
    }

    /// Stacked column indices of the given models, in order.
    pub(crate) fn columns(&self, models: &[usize]) -> Vec<usize> {
        models.iter().flat_map(|&i| self.range(i)).collect()
    }

    /// Mean of z over the accumulated samples (error when n = 0).
    pub fn mean(&self) -> Result<Vec<f64>> {
        self.require_samples(1, "mean")?;
        let n = self.n as f64;
        let shift = self.shift();
        Ok(shift
            .iter()
            .zip(&self.sum)
            .map(|(c, s)| c + s / n)
            .collect())
    }

    /// Population covariance (divided by n) of the given stacked columns: rows × cols block.
    pub(crate) fn cov_block(&self, rows: &[usize], cols: &[usize]) -> Mat<f64> {
        let n = self.n as f64;
        let mr: Vec<f64> = rows.iter().map(|&r| self.sum[r] / n).collect();
        let mc: Vec<f64> = cols.iter().map(|&c| self.sum[c] / n).collect();
        Mat::from_fn(rows.len(), cols.len(), |a, b| {
            self.gram_at(rows[a], cols[b]) / n - mr[a] * mc[b]
        })
    }

    /// Population covariance (divided by n) of the whole stacked vector, D × D, symmetric.
    pub fn covariance(&self) -> Result<Mat<f64>> {
        self.require_samples(1, "covariance")?;
        let all: Vec<usize> = (0..self.dim()).collect();
        Ok(self.cov_block(&all, &all))
    }

    /// Population covariance of the named models' stacked block (rows and columns in the order
    /// given).
    pub fn covariance_of(&self, models: &[&str]) -> Result<Mat<f64>> {
        self.require_samples(1, "covariance")?;
        let cols = self.columns(&self.indices(models)?);
        Ok(self.cov_block(&cols, &cols))
    }

    /// Adds `alpha` × the population covariance to the lower triangle (diagonal included) of
    /// `dst` (D × D, column-major); the strict upper triangle is not touched. The same
    /// arithmetic as [`Moments::covariance`], one contiguous column slice at a time (the dense
    /// analysis paths assemble 85 M entries at D = 9216: gathering them one by one cost seconds).
    pub(crate) fn add_cov_lower(&self, dst: &mut Mat<f64>, alpha: f64) {
        let (d, n) = (self.dim(), self.n as f64);
        let m: Vec<f64> = self.sum.iter().map(|s| s / n).collect();
        for c in 0..d {
            let mc = m[c];
            let g = &self.gram.col_as_slice(c)[c..];
            let out = &mut dst.col_as_slice_mut(c)[c..];
            for ((o, &gv), &mr) in out.iter_mut().zip(g).zip(&m[c..]) {
                *o += alpha * (gv / n - mr * mc);
            }
        }
    }

    /// Population covariance of the contiguous stacked rows `rows` × columns `cols`, written
    /// into `dst` (rows.len() × cols.len()). Same arithmetic as [`Moments::covariance`]; a block
    /// off the diagonal is copied from the stored lower triangle as a whole (transposed above
    /// the diagonal) instead of gathered entry by entry.
    pub(crate) fn cov_range_into(
        &self,
        rows: Range<usize>,
        cols: Range<usize>,
        mut dst: faer::MatMut<'_, f64>,
    ) {
        let g = self.gram.as_ref();
        if rows.start >= cols.end {
            dst.copy_from(g.submatrix(rows.start, cols.start, rows.len(), cols.len()));
        } else if cols.start >= rows.end {
            dst.copy_from(
                g.submatrix(cols.start, rows.start, cols.len(), rows.len())
                    .transpose(),
            );
        } else {
            for (k, c) in cols.clone().enumerate() {
                for (i, r) in rows.clone().enumerate() {
                    dst[(i, k)] = self.gram_at(r, c);
                }
            }
        }
        let n = self.n as f64;
        let mr: Vec<f64> = rows.map(|r| self.sum[r] / n).collect();
        for (k, c) in cols.enumerate() {
            let mc = self.sum[c] / n;
            for (v, &m) in dst.rb_mut().col_mut(k).iter_mut().zip(&mr) {
                *v = *v / n - m * mc;
            }
        }
    }

    /// Population variance of every stacked column (the covariance's diagonal).
    pub(crate) fn variances(&self) -> Vec<f64> {
        let n = self.n as f64;
        (0..self.dim())
            .map(|k| self.gram[(k, k)] / n - (self.sum[k] / n) * (self.sum[k] / n))
            .collect()
    }

    fn gram_at(&self, r: usize, c: usize) -> f64 {
        if r >= c {
            self.gram[(r, c)]
        } else {
            self.gram[(c, r)]
        }
    }

    pub(crate) fn require_samples(&self, need: u64, what: &str) -> Result<()> {
        if self.n < need {
            return Err(LmdError::TooFewSamples {
                what: what.to_string(),
                n: self.n,
                dim: need as usize,
            });
        }
        Ok(())
    }

    /// Adds a batch given as one row-major [n, d_i] block per model (all with the same n).
    pub fn update(&mut self, blocks: &[&[f32]]) -> Result<()> {
        if blocks.len() != self.widths.len() {
            return Err(LmdError::WidthMismatch {
                what: "number of model blocks".into(),
                expected: self.widths.len(),
                got: blocks.len(),
            });
        }
        let mut rows = None;
        for (i, block) in blocks.iter().enumerate() {
            let w = self.widths[i];
            if block.len() % w != 0 {
                return Err(LmdError::WidthMismatch {
                    what: format!("block of model {} (length {})", self.names[i], block.len()),
                    expected: w,
                    got: block.len(),
                });
            }
            let n_i = block.len() / w;
            if *rows.get_or_insert(n_i) != n_i {
                return Err(LmdError::InvalidArgument(format!(
                    "model {} has {n_i} rows but model {} has {}",
                    self.names[i],
                    self.names[0],
                    rows.unwrap_or(0)
                )));
            }
            self.check_finite(block, i, 0)?;
        }
        let n = rows.unwrap_or(0);
        let (widths, offsets) = (self.widths.clone(), self.offsets.clone());
        self.accumulate(n, |row, out| {
            for (i, block) in blocks.iter().enumerate() {
                let (w, o) = (widths[i], offsets[i]);
                for (dst, &x) in out[o..o + w].iter_mut().zip(&block[row * w..(row + 1) * w]) {
                    *dst = x as f64;
                }
            }
        })
    }

    /// Adds a batch given as one row-major [n, D] slice (the models' blocks side by side).
    pub fn update_stacked(&mut self, rows: &[f32]) -> Result<()> {
        let d = self.dim();
        let n = self.stacked_rows(rows.len(), "stacked batch")?;
        self.check_stacked_f32(rows, n)?;
        self.accumulate(n, |row, out| {
            for (dst, &x) in out.iter_mut().zip(&rows[row * d..(row + 1) * d]) {
                *dst = x as f64;
            }
        })
    }

    /// Adds a batch given as one row-major [n, D] slice of f64 values (the models' blocks side
    /// by side): what the streaming readers of [`crate::external`] hand over, chunk by chunk,
    /// so that f64 inputs are never rounded and no tensor is built. The same f64 arithmetic as
    /// [`Moments::update_stacked`].
    pub fn update_stacked_f64(&mut self, rows: &[f64]) -> Result<()> {
        let (n, d) = self.check_stacked_f64(rows)?;
        self.accumulate(n, |row, out| {
            out.copy_from_slice(&rows[row * d..(row + 1) * d])
        })
    }

    /// [`Moments::update_stacked_f64`] without a copy: the row-major [n, D] batch is shifted in
    /// place (it is left holding z − shift) and read directly as the D × n matrix of samples
    /// it already is in memory. For streaming readers that refill one buffer per chunk.
    pub fn update_stacked_f64_in_place(&mut self, rows: &mut [f64]) -> Result<()> {
        let (n, d) = self.check_stacked_f64(rows)?;
        if n == 0 {
            return Ok(());
        }
        if self.shift.is_none() {
            let mut mean = vec![0.0; d];
            for row in rows.chunks_exact(d) {
                for (m, x) in mean.iter_mut().zip(row) {
                    *m += x;
                }
            }
            mean.iter_mut().for_each(|m| *m /= n as f64);
            self.shift = Some(mean);
        }
        // The similarity accumulators read the rows before they are shifted in place.
        let n_before = self.n;
        self.feed_streams(rows, n_before)?;
        let shift = self.shift.as_deref().unwrap_or_default();
        for row in rows.chunks_exact_mut(d) {
            for ((x, c), s) in row.iter_mut().zip(shift).zip(self.sum.iter_mut()) {
                *x -= c;
                *s += *x;
            }
        }
        match self.accumulation {
            Accumulation::F64 => add_lower_gram(
                self.gram.as_mut(),
                MatRef::from_column_major_slice(rows, d, n),
            ),
            Accumulation::F32Products => {
                for part in rows.chunks(F32_PRODUCT_ROWS * d) {
                    add_lower_gram_f32(&mut self.gram, part, d);
                }
            }
        }
        self.n += n as u64;
        Ok(())
    }

    /// Adds a batch given as a [n, D] tensor of any float dtype on any device. The shifted batch
    /// Gram is computed on the tensor's device in f64 and summed into the host accumulator.
    pub fn update_tensor(&mut self, batch: &Tensor) -> Result<()> {
        let (n, d) = batch.dims2()?;
        if d != self.dim() {
            return Err(LmdError::WidthMismatch {
                what: "stacked tensor batch".into(),
                expected: self.dim(),
                got: d,
            });
        }
        if n == 0 {
            return Ok(());
        }
        let x = batch.to_dtype(DType::F64)?;
        let shift = match &self.shift {
            Some(c) => Tensor::from_slice(c, d, x.device())?,
            None => x.mean(0)?,
        };
        let xc = x.broadcast_sub(&shift)?;
        let g = xc.t()?.matmul(&xc)?.flatten_all()?.to_vec1::<f64>()?;
        let s = xc.sum(0)?.to_vec1::<f64>()?;
        // A non-finite entry makes its column's diagonal entry non-finite, so the Gram read back
        // anyway is the check: no device reduction over the batch (candle's `sum_all` runs on
        // one block) and no read back beyond it. Only then is the batch looked at on the host,
        // to name the entry.
        if (0..d).any(|c| !g[c * d + c].is_finite()) {
            let host = batch
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            self.check_stacked_f32(&host, n)?;
            // Every entry finite, yet the sum of their squares is not.
            return Err(LmdError::InvalidArgument(format!(
                "a batch of {n} rows overflows the f64 Gram: its squares sum beyond f64's range"
            )));
        }
        if self.shift.is_none() {
            self.shift = Some(shift.to_vec1::<f64>()?);
        }
        for c in 0..d {
            for r in c..d {
                self.gram[(r, c)] += g[r * d + c];
            }
        }
        for (acc, v) in self.sum.iter_mut().zip(&s) {
            *acc += v;
        }
        let n_before = self.n;
        self.n += n as u64;
        if self.streams.is_some() {
            let raw = x.flatten_all()?.to_vec1::<f64>()?;
            self.feed_streams(&raw, n_before)?;
        }
        Ok(())
    }

    /// The rows of a stacked batch of `len` values: `len` must be a multiple of the width D.
    fn stacked_rows(&self, len: usize, what: &str) -> Result<usize> {
        let d = self.dim();
        if !len.is_multiple_of(d) {
            return Err(LmdError::WidthMismatch {
                what: format!("{what} of length {len}"),
                expected: d,
                got: len,
            });
        }
        Ok(len / d)
    }

    /// The rows n and width D of a stacked f64 batch, checked: a length that is a multiple of D
    /// and finite values (else the model, row and column of the first bad one).
    fn check_stacked_f64(&self, rows: &[f64]) -> Result<(usize, usize)> {
        let d = self.dim();
        let n = self.stacked_rows(rows.len(), "stacked f64 batch")?;
        if let Some(k) = rows.iter().position(|x| !x.is_finite()) {
            let (r, c) = (k / d, k % d);
            let model = self.offsets.partition_point(|&o| o <= c) - 1;
            return Err(LmdError::NonFinite {
                model: self.names[model].clone(),
                row: r,
                col: c - self.offsets[model],
                value: rows[k] as f32,
            });
        }
        Ok((n, d))
    }

    /// Every entry of the `n` stacked f32 rows finite (else the model, row and column of the
    /// first that is not).
    fn check_stacked_f32(&self, rows: &[f32], n: usize) -> Result<()> {
        let d = self.dim();
        for r in 0..n {
            for i in 0..self.widths.len() {
                let row = &rows[r * d + self.offsets[i]..r * d + self.offsets[i + 1]];
                self.check_finite(row, i, r)?;
            }
        }
        Ok(())
    }

    fn check_finite(&self, block: &[f32], model: usize, first_row: usize) -> Result<()> {
        let w = self.widths[model];
        match block.iter().position(|x| !x.is_finite()) {
            None => Ok(()),
            Some(k) => Err(LmdError::NonFinite {
                model: self.names[model].clone(),
                row: first_row + k / w,
                col: k % w,
                value: block[k],
            }),
        }
    }

    /// Shifts and stages `n` rows (filled by `row_into`) in chunks and adds their Gram.
    fn accumulate(&mut self, n: usize, row_into: impl Fn(usize, &mut [f64])) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let n_before = self.n;
        let d = self.dim();
        if self.shift.is_none() {
            let mut mean = vec![0.0; d];
            let mut row = vec![0.0; d];
            for r in 0..n {
                row_into(r, &mut row);
                for (m, x) in mean.iter_mut().zip(&row) {
                    *m += x;
                }
            }
            mean.iter_mut().for_each(|m| *m /= n as f64);
            self.shift = Some(mean);
        }
        let shift = self.shift.clone().unwrap_or_default();
        let chunk = (STAGING_BYTES / (8 * d)).clamp(64, n.max(64)).min(n);
        // Column j of the staging matrix is sample j: rows copy contiguously.
        let mut stage = Mat::<f64>::zeros(d, chunk);
        let mut start = 0;
        while start < n {
            let len = chunk.min(n - start);
            for j in 0..len {
                let col = stage.col_as_slice_mut(j);
                row_into(start + j, col);
                for ((x, c), s) in col.iter_mut().zip(&shift).zip(self.sum.iter_mut()) {
                    *x -= c;
                    *s += *x;
                }
            }
            let x = stage.as_ref().subcols(0, len);
            add_lower_gram(self.gram.as_mut(), x);
            start += len;
        }
        self.n += n as u64;
        if self.streams.is_some() {
            let mut raw = vec![0.0; n * d];
            for (r, row) in raw.chunks_exact_mut(d).enumerate() {
                row_into(r, row);
            }
            self.feed_streams(&raw, n_before)?;
        }
        Ok(())
    }

    /// Adds another shard of the same models (names and widths must match). The result equals
    /// one pass over both shards' rows (up to rounding).
    pub fn merge(&mut self, other: &Moments) -> Result<()> {
        if self.names != other.names || self.widths != other.widths {
            return Err(LmdError::WidthMismatch {
                what: format!("merge of {:?} into {:?}", other.names, self.names),
                expected: self.dim(),
                got: other.dim(),
            });
        }
        match (self.similarity_tracking(), other.similarity_tracking()) {
            (Some((a, _)), Some((b, _))) if a != b => {
                return Err(LmdError::InvalidArgument(format!(
                    "merge of moments whose nulls were drawn with seeds {b} and {a}"
                )))
            }
            (Some(_), None) if other.n > 0 => {
                return Err(LmdError::InvalidArgument(
                    "merge of moments without similarity accumulators into moments with them"
                        .into(),
                ))
            }
            (None, Some(_)) if self.n > 0 => {
                return Err(LmdError::InvalidArgument(
                    "merge of moments with similarity accumulators into moments without them"
                        .into(),
                ))
            }
            _ => {}
        }
        if other.n == 0 {
            return Ok(());
        }
        let Some(shift) = self.shift.clone() else {
            let keep = self.streams.as_ref().map(|s| s.first_row);
            *self = other.clone();
            if let (Some(first), Some(st)) = (keep, self.streams.as_mut()) {
                st.first_row = st.first_row.min(first);
            }
            return Ok(());
        };
        // The other shard's similarity sums, about our shifts, before its Gram is folded in.
        let streams = match (&self.streams, &other.streams) {
            (Some(mine), Some(theirs)) => {
                let about = |own: &Moments, theirs_m: &Moments, norms: &NormMoments| {
                    let delta: Vec<f64> = theirs_m
                        .shift()
                        .iter()
                        .zip(own.shift())
                        .map(|(b, a)| b - a)
                        .collect();
                    norms.reexpressed(theirs_m, &delta)
                };
                let norms = about(self, other, &theirs.norms);
                let null_norms = if mine.null.n > 0 {
                    about(&mine.null, &theirs.null, &theirs.null_norms)
                } else {
                    theirs.null_norms.clone()
                };
                Some((norms, null_norms, theirs.null.clone(), theirs.first_row))
            }
            _ => None,
        };
        // Re-express the other shard about our shift: z − a = (z − b) + δ with δ = b − a.
        let delta: Vec<f64> = other
            .shift()
            .iter()
            .zip(&shift)
            .map(|(b, a)| b - a)
            .collect();
        let nb = other.n as f64;
        let d = self.dim();
        for c in 0..d {
            for r in c..d {
                self.gram[(r, c)] += other.gram[(r, c)]
                    + other.sum[r] * delta[c]
                    + delta[r] * other.sum[c]
                    + nb * delta[r] * delta[c];
            }
        }
        for ((s, so), dl) in self.sum.iter_mut().zip(&other.sum).zip(&delta) {
            *s += so + nb * dl;
        }
        self.n += other.n;
        if let (Some(st), Some((norms, null_norms, null, first))) = (self.streams.as_mut(), streams)
        {
            st.norms.add(&norms);
            st.null.merge(&null)?;
            st.null_norms.add(&null_norms);
            st.first_row = st.first_row.min(first);
        }
        Ok(())
    }

    /// Writes the moments to `path` (safetensors: f64 tensors `gram` \[D, D\], `sum` \[D\],
    /// `shift` \[D\]; JSON metadata with names, widths, n under the header key `lmd.moments`).
    /// The write is atomic: a uniquely named hidden temporary file beside it
    /// ([`files::write_atomic`]), synced to disk, then renamed over `path`; a kill at any point
    /// leaves the previous file whole.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        self.save_with(path, &HashMap::new())
    }

    /// [`Moments::save`] with extra header metadata (e.g. what the moments were computed from;
    /// read back by [`Moments::load_with`]). A key equal to the moments' own is refused.
    pub fn save_with(&self, path: impl AsRef<Path>, extra: &HashMap<String, String>) -> Result<()> {
        let path = path.as_ref();
        if extra.contains_key(META_KEY) {
            return Err(LmdError::InvalidArgument(format!(
                "metadata key {META_KEY} is reserved"
            )));
        }
        let (d, m) = (self.dim(), self.names.len());
        let gram = le_bytes((0..d * d).map(|k| self.gram_at(k / d, k % d)));
        let shift = le_bytes(self.shift());
        let sum = le_bytes(self.sum.iter().copied());
        let mut meta = serde_json::json!({
            "format": FORMAT,
            "names": self.names,
            "widths": self.widths,
            "n": self.n,
            "has_shift": self.shift.is_some(),
        });
        // The similarity accumulators, when tracked: optional tensors `sim.q`, `sim.v` and the
        // null's `null.{gram,shift,sum,q,v}`.
        let mut sim_bytes: Vec<(&str, Vec<u8>, Vec<usize>)> = Vec::new();
        if let Some(st) = &self.streams {
            meta["similarity"] = serde_json::json!({
                "seed": st.seed,
                "first_row": st.first_row,
                "null_n": st.null.n,
                "null_has_shift": st.null.shift.is_some(),
            });
            let nm = &st.null;
            sim_bytes = vec![
                ("sim.q", le_bytes(st.norms.q.iter().copied()), vec![m, m]),
                ("sim.v", le_bytes(st.norms.v.iter().copied()), vec![m, d]),
                (
                    "null.gram",
                    le_bytes((0..d * d).map(|k| nm.gram_at(k / d, k % d))),
                    vec![d, d],
                ),
                ("null.shift", le_bytes(nm.shift()), vec![d]),
                ("null.sum", le_bytes(nm.sum.iter().copied()), vec![d]),
                (
                    "null.q",
                    le_bytes(st.null_norms.q.iter().copied()),
                    vec![m, m],
                ),
                (
                    "null.v",
                    le_bytes(st.null_norms.v.iter().copied()),
                    vec![m, d],
                ),
            ];
        }
        let mut tensors = vec![
            ("gram", f64_view(&gram, vec![d, d])?),
            ("shift", f64_view(&shift, vec![d])?),
            ("sum", f64_view(&sum, vec![d])?),
        ];
        for (name, bytes, shape) in &sim_bytes {
            tensors.push((*name, f64_view(bytes, shape.clone())?));
        }
        let mut info = extra.clone();
        info.insert(META_KEY.to_string(), meta.to_string());
        let bytes =
            safetensors::serialize(tensors, Some(info)).map_err(|e| LmdError::Malformed {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        // Whole or not at all: a reader (or a crash, or a kill) sees the old file or the new
        // one, never a part; two writers never share a temporary file.
        files::write_atomic(path, &bytes)?;
        Ok(())
    }

    /// Reads moments written by [`Moments::save`], validating shapes and metadata.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Ok(Self::load_with(path)?.0)
    }

    /// Reads moments written by [`Moments::save_with`] and the extra metadata written with them.
    pub fn load_with(path: impl AsRef<Path>) -> Result<(Self, HashMap<String, String>)> {
        let path = path.as_ref();
        let bad = |reason: String| LmdError::Malformed {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|source| LmdError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| bad(e.to_string()))?;
        let mut extra = header.metadata().clone().unwrap_or_default();
        let meta = extra
            .remove(META_KEY)
            .ok_or_else(|| bad(format!("no {META_KEY} metadata")))?;
        let meta: serde_json::Value =
            serde_json::from_str(&meta).map_err(|e| bad(e.to_string()))?;
        if meta["format"] != FORMAT {
            return Err(bad(format!("format {} is not {FORMAT}", meta["format"])));
        }
        let names: Vec<String> = serde_json::from_value(meta["names"].clone())
            .map_err(|e| bad(format!("names: {e}")))?;
        let widths: Vec<usize> = serde_json::from_value(meta["widths"].clone())
            .map_err(|e| bad(format!("widths: {e}")))?;
        let n = meta["n"].as_u64().ok_or_else(|| bad("n missing".into()))?;
        let has_shift = meta["has_shift"].as_bool().unwrap_or(true);
        // The D × D f64 Gram must be in the file: refuse widths it cannot hold before
        // allocating anything of their size.
        let fits = widths
            .iter()
            .try_fold(0usize, |a, &w| a.checked_add(w))
            .and_then(|d| d.checked_mul(d))
            .and_then(|dd| dd.checked_mul(8))
            .is_some_and(|b| b <= bytes.len());
        if !fits {
            return Err(bad(format!(
                "widths {widths:?} need a Gram larger than the file ({} bytes)",
                bytes.len()
            )));
        }
        let mut m = Self::new(names, widths).map_err(|e| bad(e.to_string()))?;
        let d = m.dim();
        let st = SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
        let read = |name: &str, shape: &[usize]| -> Result<Vec<f64>> {
            let t = st.tensor(name).map_err(|e| bad(format!("{name}: {e}")))?;
            if t.dtype() != Dtype::F64 || t.shape() != shape {
                return Err(bad(format!(
                    "{name}: expected F64 {shape:?}, found {:?} {:?}",
                    t.dtype(),
                    t.shape()
                )));
            }
            Ok(t.data()
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                .collect())
        };
        let gram = read("gram", &[d, d])?;
        let shift = read("shift", &[d])?;
        m.sum = read("sum", &[d])?;
        if gram
            .iter()
            .chain(&shift)
            .chain(&m.sum)
            .any(|x| !x.is_finite())
        {
            return Err(bad("non-finite values".into()));
        }
        // Samples are summed about the shift taken at the first of them: samples without one,
        // or sums without samples, cannot have come from `save`.
        if n > 0 && !has_shift {
            return Err(bad(format!(
                "{n} samples but no shift they were summed about"
            )));
        }
        if n == 0 && gram.iter().chain(&m.sum).any(|&x| x != 0.0) {
            return Err(bad("non-zero sums of 0 samples".into()));
        }
        m.gram = Mat::from_fn(d, d, |r, c| if r >= c { gram[r * d + c] } else { 0.0 });
        m.shift = has_shift.then_some(shift);
        m.n = n;
        if let Some(sim) = meta.get("similarity") {
            let k = m.names.len();
            let field = |f: &str| {
                sim[f]
                    .as_u64()
                    .ok_or_else(|| bad(format!("similarity.{f} missing")))
            };
            let (seed, first_row, null_n) = (field("seed")?, field("first_row")?, field("null_n")?);
            let null_has_shift = sim["null_has_shift"].as_bool().unwrap_or(true);
            let mut st = Streams::new(m.names.clone(), m.widths.clone(), seed, first_row)?;
            let finite = |v: Vec<f64>, name: &str| -> Result<Vec<f64>> {
                match v.iter().all(|x| x.is_finite()) {
                    true => Ok(v),
                    false => Err(bad(format!("{name}: non-finite values"))),
                }
            };
            st.norms = NormMoments::from_parts(
                k,
                d,
                finite(read("sim.q", &[k, k])?, "sim.q")?,
                finite(read("sim.v", &[k, d])?, "sim.v")?,
            );
            st.null_norms = NormMoments::from_parts(
                k,
                d,
                finite(read("null.q", &[k, k])?, "null.q")?,
                finite(read("null.v", &[k, d])?, "null.v")?,
            );
            let ng = finite(read("null.gram", &[d, d])?, "null.gram")?;
            st.null.gram = Mat::from_fn(d, d, |r, c| if r >= c { ng[r * d + c] } else { 0.0 });
            st.null.sum = finite(read("null.sum", &[d])?, "null.sum")?;
            let nshift = finite(read("null.shift", &[d])?, "null.shift")?;
            st.null.shift = null_has_shift.then_some(nshift);
            st.null.n = null_n;
            if null_n != n {
                return Err(bad(format!("{n} rows but a null of {null_n}")));
            }
            m.streams = Some(Box::new(st));
        }
        Ok((m, extra))
    }
}

/// `acc` (lower triangle) += x xᵀ for a D × k block of shifted samples (one per column).
pub(crate) fn add_lower_gram(acc: faer::MatMut<'_, f64>, x: MatRef<'_, f64>) {
    triangular::matmul(
        acc,
        BlockStructure::TriangularLower,
        Accum::Add,
        x,
        BlockStructure::Rectangular,
        x.transpose(),
        BlockStructure::Rectangular,
        1.0,
        faer::get_global_parallelism(),
    );
}

/// `acc` (lower triangle) += x xᵀ for the shifted samples `rows` (row-major [k, D], i.e. the
/// D × k sample matrix), the products formed in f32 one block of columns at a time and added
/// into the f64 accumulator.
fn add_lower_gram_f32(acc: &mut Mat<f64>, rows: &[f64], d: usize) {
    let k = rows.len() / d;
    let xs: Vec<f32> = rows.iter().map(|&v| v as f32).collect();
    let x = MatRef::from_column_major_slice(&xs, d, k);
    let mut block = Mat::<f32>::zeros(d, F32_BLOCK_COLS.min(d));
    let mut j0 = 0;
    while j0 < d {
        let bw = F32_BLOCK_COLS.min(d - j0);
        faer::linalg::matmul::matmul(
            block.as_mut().submatrix_mut(0, 0, d - j0, bw),
            Accum::Replace,
            x.subrows(j0, d - j0),
            x.subrows(j0, bw).transpose(),
            1.0f32,
            faer::get_global_parallelism(),
        );
        for c in 0..bw {
            let col = j0 + c;
            let src = &block.col_as_slice(c)[c..d - j0];
            let dst = &mut acc.col_as_slice_mut(col)[col..];
            for (o, &v) in dst.iter_mut().zip(src) {
                *o += v as f64;
            }
        }
        j0 += bw;
    }
}

/// Little-endian bytes of f64 values (the safetensors layout).
fn le_bytes(values: impl IntoIterator<Item = f64>) -> Vec<u8> {
    values.into_iter().flat_map(f64::to_le_bytes).collect()
}

fn f64_view(bytes: &[u8], shape: Vec<usize>) -> Result<safetensors::tensor::TensorView<'_>> {
    safetensors::tensor::TensorView::new(Dtype::F64, shape, bytes)
        .map_err(|e| LmdError::InvalidArgument(format!("safetensors view: {e}")))
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// Moments of 40 correlated rows of three models of unequal widths.
    fn small() -> Moments {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut m = Moments::new(vec!["a".into(), "b".into(), "c".into()], vec![3, 5, 4]).unwrap();
        let rows: Vec<f32> = (0..40 * 12)
            .map(|k| rng.random::<f32>() + 0.1 * (k % 12) as f32 + 2.0)
            .collect();
        m.update_stacked(&rows).unwrap();
        m
    }

    #[test]
    fn dense_assembly_equals_the_gathered_covariance() {
        let m = small();
        let full = m.covariance().unwrap();
        let mut lower = Mat::<f64>::zeros(12, 12);
        m.add_cov_lower(&mut lower, 1.0);
        let var = m.variances();
        for c in 0..12 {
            assert_eq!(var[c], full[(c, c)]);
            for r in 0..12 {
                let want = if r >= c { full[(r, c)] } else { 0.0 };
                assert_eq!(lower[(r, c)], want, "({r}, {c})");
            }
        }
        // Every block pair: below, above and on the diagonal.
        for i in 0..3 {
            for j in 0..3 {
                let (ri, rj) = (m.range(i), m.range(j));
                let mut got = Mat::<f64>::zeros(ri.len(), rj.len());
                m.cov_range_into(ri.clone(), rj.clone(), got.as_mut());
                let want = m.cov_block(&ri.clone().collect::<Vec<_>>(), &rj.collect::<Vec<_>>());
                assert_eq!(got, want, "block ({i}, {j})");
            }
        }
    }
}
