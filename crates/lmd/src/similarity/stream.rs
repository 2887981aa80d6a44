//! What the similarity measures need beside the joint moments, accumulated in the same pass
//! ([`Moments::track_similarity`]):
//!
//! - **per-row norm moments** ([`NormMoments`]): with α_rp = ‖block p of row r‖² (about the
//!   moments' shift), Q_pq = Σ_r α_rp α_rq (M × M) and V_p = Σ_r α_rp z_r (M × D). Debiased
//!   CKA needs Σ_r a_rp a_rq with a the squared norms of the *centred* rows; it is a quartic
//!   statistic that the Gram does not hold, and Q, V, the Gram and the sum give it exactly
//!   once the mean is known ([`NormMoments::reexpressed`]). Memory (M² + M·D) f64.
//! - **the broken pairing** (the null): the same rows with the pairing of sequences broken
//!   inside each update (chunk): model p's block of row r is taken from row σᵖ(r) of the
//!   chunk, σ a uniformly random k-cycle of the chunk's k rows (Sattolo's algorithm, seeded by
//!   the seed and the chunk's first global row). σᵖ⁻ᑫ has no fixed point whenever k does not
//!   divide p − q, so with k ≥ M every pair of models is deranged on every row; a chunk of
//!   k < M rows leaves the pairs with k | (p − q) paired on it. Each model's own rows are only
//!   reordered, so its own moments are unchanged. The null's joint moments and norm moments
//!   are a second [`Moments`] (D² + D f64) and a second [`NormMoments`].

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::Result;
use crate::moments::Moments;

/// Σ_r α_rp α_rq and Σ_r α_rp z_r over the rows about a shift (α_rp = squared norm of block p
/// of row r): the per-row norm moments debiased CKA needs, (M² + M·D) f64.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NormMoments {
    m: usize,
    d: usize,
    /// Q, M × M row-major (symmetric).
    pub(crate) q: Vec<f64>,
    /// V, M × D row-major: row p is Σ_r α_rp z_r.
    pub(crate) v: Vec<f64>,
}

impl NormMoments {
    pub(crate) fn new(m: usize, d: usize) -> Self {
        Self {
            m,
            d,
            q: vec![0.0; m * m],
            v: vec![0.0; m * d],
        }
    }

    pub(crate) fn from_parts(m: usize, d: usize, q: Vec<f64>, v: Vec<f64>) -> Self {
        Self { m, d, q, v }
    }

    /// Adds shifted rows (row-major k × D; `offsets` the M + 1 block starts).
    pub(crate) fn update(&mut self, rows: &[f64], offsets: &[usize]) {
        let (m, d) = (self.m, self.d);
        let mut alpha = vec![0.0; m];
        for row in rows.chunks_exact(d) {
            for (p, a) in alpha.iter_mut().enumerate() {
                *a = row[offsets[p]..offsets[p + 1]].iter().map(|x| x * x).sum();
            }
            for p in 0..m {
                for q in 0..m {
                    self.q[p * m + q] += alpha[p] * alpha[q];
                }
                let a = alpha[p];
                for (o, x) in self.v[p * d..(p + 1) * d].iter_mut().zip(row) {
                    *o += a * x;
                }
            }
        }
    }

    /// The same sums about another origin: rows x' + δ instead of x' (δ per column), from the
    /// moments `mom` that these norm moments accompany (its Gram, sum and n, about the same
    /// shift as `self`). With δ = −mean they are the sums of the centred rows; with δ = b − a
    /// a shard's sums about shift b become sums about shift a (for a merge).
    pub(crate) fn reexpressed(&self, mom: &Moments, delta: &[f64]) -> NormMoments {
        let (m, d) = (self.m, self.d);
        let n = mom.n() as f64;
        let s = mom.sum_ref();
        let g = mom.gram_ref();
        let owner: Vec<usize> = (0..m).flat_map(|p| mom.range(p).map(move |_| p)).collect();
        // W[k, p] = Σ_{c ∈ P} G[k, c] δ_c, one walk over the stored lower triangle.
        let mut w = vec![0.0; d * m];
        for c in 0..d {
            let col = &g.col_as_slice(c)[c..];
            let (dc, pc) = (delta[c], owner[c]);
            w[c * m + pc] += col[0] * dc;
            for (r, &gv) in (c + 1..d).zip(&col[1..]) {
                w[r * m + pc] += gv * dc;
                w[c * m + owner[r]] += gv * delta[r];
            }
        }
        let (mut a, mut dp2, mut ds) = (vec![0.0; m], vec![0.0; m], vec![0.0; m]);
        for p in 0..m {
            for c in mom.range(p) {
                a[p] += g[(c, c)];
                dp2[p] += delta[c] * delta[c];
                ds[p] += delta[c] * s[c];
            }
        }
        let mut out = NormMoments::new(m, d);
        for p in 0..m {
            let lin = a[p] + 2.0 * ds[p] + n * dp2[p];
            let (vp, op) = (&self.v[p * d..(p + 1) * d], &mut out.v[p * d..(p + 1) * d]);
            for k in 0..d {
                op[k] = vp[k] + delta[k] * lin + 2.0 * w[k * m + p] + dp2[p] * s[k];
            }
        }
        for p in 0..m {
            for q in 0..m {
                let (rp, rq) = (mom.range(p), mom.range(q));
                let vpq: f64 = rq.clone().map(|k| delta[k] * self.v[p * d + k]).sum();
                let vqp: f64 = rp.map(|k| delta[k] * self.v[q * d + k]).sum();
                let wpq: f64 = rq.map(|k| delta[k] * w[k * m + p]).sum();
                out.q[p * m + q] = self.q[p * m + q]
                    + 2.0 * vpq
                    + 2.0 * vqp
                    + 4.0 * wpq
                    + dp2[q] * (a[p] + 2.0 * ds[p])
                    + dp2[p] * (a[q] + 2.0 * ds[q])
                    + n * dp2[p] * dp2[q];
            }
        }
        out
    }

    /// Adds another accumulator's sums (about the same origin).
    pub(crate) fn add(&mut self, other: &NormMoments) {
        for (a, b) in self.q.iter_mut().zip(&other.q) {
            *a += b;
        }
        for (a, b) in self.v.iter_mut().zip(&other.v) {
            *a += b;
        }
    }

    /// Σ_r a_rp a_rq of the centred rows (M × M), from sums about the moments' shift.
    pub(crate) fn centred_q(&self, mom: &Moments) -> Vec<f64> {
        let n = mom.n() as f64;
        let delta: Vec<f64> = mom.sum_ref().iter().map(|s| -s / n).collect();
        self.reexpressed(mom, &delta).q
    }
}

/// The accumulators [`Moments::track_similarity`] adds: norm moments of the rows as paired, and
/// the joint and norm moments of the rows with the pairing broken inside each chunk.
#[derive(Clone, Debug)]
pub(crate) struct Streams {
    /// Seed of every chunk's derangement.
    pub(crate) seed: u64,
    /// Global index of the first row these moments hold (a shard's first row in its split), so
    /// that shards merged equal one pass over the split cut into the same chunks.
    pub(crate) first_row: u64,
    /// Norm moments of the paired rows, about the owning moments' shift.
    pub(crate) norms: NormMoments,
    /// Joint moments of the rows with the pairing broken.
    pub(crate) null: Moments,
    /// Norm moments of the broken rows, about `null`'s shift.
    pub(crate) null_norms: NormMoments,
}

impl Streams {
    pub(crate) fn new(
        names: Vec<String>,
        widths: Vec<usize>,
        seed: u64,
        first_row: u64,
    ) -> Result<Self> {
        let null = Moments::new(names, widths)?;
        let (m, d) = (null.names().len(), null.dim());
        Ok(Self {
            seed,
            first_row,
            norms: NormMoments::new(m, d),
            null,
            null_norms: NormMoments::new(m, d),
        })
    }

    /// Adds one chunk of raw rows (row-major k × D, finite: the owner checked them) whose first
    /// row is row `n_before` of the owning moments, `shift` the owner's shift.
    pub(crate) fn update(
        &mut self,
        raw: &[f64],
        shift: &[f64],
        offsets: &[usize],
        n_before: u64,
    ) -> Result<()> {
        let d = shift.len();
        let k = raw.len() / d;
        if k == 0 {
            return Ok(());
        }
        let shifted: Vec<f64> = raw
            .chunks_exact(d)
            .flat_map(|row| row.iter().zip(shift).map(|(x, c)| x - c))
            .collect();
        self.norms.update(&shifted, offsets);
        let sigma = chunk_cycle(self.seed, self.first_row + n_before, k);
        let mut broken = vec![0.0; k * d];
        let mut from: Vec<usize> = (0..k).collect();
        for p in 0..offsets.len() - 1 {
            let cols = offsets[p]..offsets[p + 1];
            for (r, &src) in from.iter().enumerate() {
                broken[r * d + cols.start..r * d + cols.end]
                    .copy_from_slice(&raw[src * d + cols.start..src * d + cols.end]);
            }
            // Model p + 1 reads σ^(p+1)(r).
            for f in from.iter_mut() {
                *f = sigma[*f];
            }
        }
        self.null.update_stacked_f64(&broken)?;
        let nshift = self.null.shift();
        for row in broken.chunks_exact_mut(d) {
            for (x, c) in row.iter_mut().zip(&nshift) {
                *x -= c;
            }
        }
        self.null_norms.update(&broken, offsets);
        Ok(())
    }
}

/// A uniformly random k-cycle of 0..k (Sattolo's algorithm) drawn from `seed` and the chunk's
/// first global row (its own ChaCha stream): σ[r] is the row that follows r.
pub(crate) fn chunk_cycle(seed: u64, first_row: u64, k: usize) -> Vec<usize> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(first_row);
    let mut sigma: Vec<usize> = (0..k).collect();
    for i in (1..k).rev() {
        let j = rng.random_range(0..i);
        sigma.swap(i, j);
    }
    sigma
}

/// The rows a chunk's broken pairing gives model `p` (σᵖ applied to 0..k): row r of model p in
/// the null is row `from[r]` of the chunk.
pub fn deranged_rows(seed: u64, first_row: u64, k: usize, p: usize) -> Vec<usize> {
    let sigma = chunk_cycle(seed, first_row, k);
    let mut from: Vec<usize> = (0..k).collect();
    for _ in 0..p {
        for f in from.iter_mut() {
            *f = sigma[*f];
        }
    }
    from
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_cycle_is_one_cycle_and_its_powers_below_k_have_no_fixed_point() {
        for k in [2usize, 3, 7, 40] {
            let sigma = chunk_cycle(9, 512, k);
            let mut seen = vec![false; k];
            let mut r = 0;
            for _ in 0..k {
                assert!(!seen[r], "k = {k}: {sigma:?} is not one cycle");
                seen[r] = true;
                r = sigma[r];
            }
            assert_eq!(r, 0);
            for p in 1..k {
                let from = deranged_rows(9, 512, k, p);
                assert!(
                    from.iter().enumerate().all(|(r, &f)| r != f),
                    "k = {k}, p = {p}"
                );
            }
        }
        assert_ne!(chunk_cycle(9, 0, 40), chunk_cycle(9, 40, 40));
    }
}
