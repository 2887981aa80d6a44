//! LMD beside the field's similarity measures, each against a null of the same data.
//!
//! From the same streamed pass as the moments ([`Moments::track_similarity`] adds only the
//! accumulators the measures need; see [`stream`]), for every pair of models:
//!
//! | measure | from | needs |
//! |---|---|---|
//! | linear CKA | test moments | n ≥ 2 |
//! | debiased linear CKA | test moments + norm moments (Q, V) | n ≥ 4 |
//! | mean CCA correlation | test moments | n > d of both models |
//! | SVCCA (top k directions, then CCA) | test moments | k ≤ d, n > k |
//! | orthogonal Procrustes distance | test moments | n ≥ 2 |
//! | held-out R², both directions | train and test moments | n_train > d of the basis |
//! | mutual k-NN | a seeded sample of embeddings | sample > k |
//!
//! **The null** of every measure is the same measure between the same two models with the
//! pairing of sequences broken: the streamed measures read the moments of the rows deranged
//! inside each chunk ([`Moments::null`]; for R² both splits' nulls: fit on the broken train
//! pairs, scored on the broken test pairs), mutual k-NN the sample deranged the same way.
//! Each is reported beside the measure and **calibrated**: (value − null) / (best − null),
//! 1 at the measure's best value (0 for the Procrustes distance, 1 for the others) and 0 at
//! its null.
//!
//! Memory: the streamed measures hold the joint moments of each split and of its null
//! (2 · D² f64 per split) and the norm moments (2 (M² + M·D) f64 per split); at the paper's
//! 12 × 768 (D = 9216) that is 2 · 679.5 MB + 1.8 MB per split, 2.72 GB for train and test.
//! The analysis adds, per pair, d_i × d_j blocks and their singular values (no D × D buffer
//! beyond the moments'). Mutual k-NN holds the sample (s · D f64) and one s × s similarity
//! matrix at a time, O(M s² d) flops.

pub mod knn;
pub(crate) mod measures;
pub mod stream;
pub mod table;

use faer::Mat;
use serde::{Deserialize, Serialize};

use crate::analysis::pairwise_r2;
use crate::error::{LmdError, Result};
use crate::fit::Ridge;
use crate::moments::Moments;
use crate::pair_matrix::PairMatrix;
use measures::{
    cholesky, cross, hsic_unbiased, linear_cka, mean_canonical, mean_singular, need_rows,
    own_blocks, procrustes, svcca_basis, zero_variance, Own,
};

pub use knn::{mutual_knn, sample_indices, KnnSample};
pub use stream::deranged_rows;
pub use table::{agreement, rank_agreement_table, similarity_table, write_similarity};

/// A similarity measure of the field (or LMD's held-out R²).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Measure {
    /// Linear CKA (Kornblith et al. 2019).
    LinearCka,
    /// Debiased linear CKA: the unbiased HSIC estimator (Song et al. 2012).
    DebiasedCka,
    /// The mean canonical correlation.
    MeanCca,
    /// SVCCA: CCA on each model's top principal directions (Raghu et al. 2017).
    Svcca,
    /// Orthogonal Procrustes distance on centred, norm-scaled embeddings (Ding et al. 2021): a
    /// distance, 0 at its best.
    Procrustes,
    /// LMD's held-out R² (rows = target, columns = basis; Zhang, eq. 2).
    HeldOutR2,
    /// Mutual k-NN: the mean overlap of each sequence's k nearest neighbours (Huh et al. 2024).
    MutualKnn,
}

impl Measure {
    /// The measures computed from streamed moments, in report order.
    pub const STREAMED: [Measure; 6] = [
        Measure::HeldOutR2,
        Measure::LinearCka,
        Measure::DebiasedCka,
        Measure::MeanCca,
        Measure::Svcca,
        Measure::Procrustes,
    ];

    /// Its name in sentences and tables.
    pub fn name(&self) -> &'static str {
        match self {
            Measure::LinearCka => "linear CKA",
            Measure::DebiasedCka => "debiased linear CKA",
            Measure::MeanCca => "mean CCA correlation",
            Measure::Svcca => "SVCCA",
            Measure::Procrustes => "orthogonal Procrustes distance",
            Measure::HeldOutR2 => "held-out R²",
            Measure::MutualKnn => "mutual k-NN",
        }
    }

    /// A short file-safe name (`cka`, `debiased_cka`, ...).
    pub fn stem(&self) -> &'static str {
        match self {
            Measure::LinearCka => "cka",
            Measure::DebiasedCka => "debiased_cka",
            Measure::MeanCca => "cca",
            Measure::Svcca => "svcca",
            Measure::Procrustes => "procrustes",
            Measure::HeldOutR2 => "r2",
            Measure::MutualKnn => "mutual_knn",
        }
    }

    /// The value of a model against itself (the measure's best).
    pub fn best(&self) -> f64 {
        match self {
            Measure::Procrustes => 0.0,
            _ => 1.0,
        }
    }

    /// Whether larger values mean more similar (false only for the Procrustes distance).
    pub fn higher_is_more_similar(&self) -> bool {
        *self != Measure::Procrustes
    }

    /// Whether the measure depends on the order of the pair (held-out R² only).
    pub fn directed(&self) -> bool {
        *self == Measure::HeldOutR2
    }
}

/// Settings of the similarity measures, checked by [`SimilarityParams::check`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimilarityParams {
    /// Ridge λ added to each model's covariance in CCA (≥ 0; 0 is plain CCA, which needs
    /// n > d and full-rank covariances).
    pub cca_ridge: f64,
    /// SVCCA: the top principal directions kept per model (≥ 1, at most every model's width).
    pub svcca_dims: usize,
    /// The ridge of the held-out R² fits (not serialised: a study sets its own).
    #[serde(skip, default = "reference_ridge")]
    pub ridge: Ridge,
    /// Mutual k-NN: neighbours per sequence (≥ 1, smaller than the sample).
    pub knn_k: usize,
    /// Mutual k-NN: sequences sampled by seed (≥ 2).
    pub knn_sample: usize,
    /// Seed of the nulls' derangements and of the k-NN sample.
    pub seed: u64,
}

impl Default for SimilarityParams {
    /// CCA without a ridge, SVCCA on 20 directions, the reference ridge for R², mutual k-NN
    /// with k = 10 on 512 sequences, seed 0.
    fn default() -> Self {
        Self {
            cca_ridge: 0.0,
            svcca_dims: 20,
            ridge: Ridge::REFERENCE,
            knn_k: 10,
            knn_sample: 512,
            seed: 0,
        }
    }
}

fn reference_ridge() -> Ridge {
    Ridge::REFERENCE
}

impl SimilarityParams {
    /// Checks every setting (one sentence naming the measure and the setting).
    pub fn check(&self) -> Result<()> {
        if !self.cca_ridge.is_finite() || self.cca_ridge < 0.0 {
            let why = format!("the ridge {} must be finite and ≥ 0", self.cca_ridge);
            return Err(LmdError::measure(Measure::MeanCca.name(), why));
        }
        if self.svcca_dims == 0 {
            let why = "it needs at least one direction per model (svcca_dims = 0)";
            return Err(LmdError::measure(Measure::Svcca.name(), why));
        }
        if self.knn_k == 0 {
            return Err(LmdError::measure(
                Measure::MutualKnn.name(),
                "k must be ≥ 1",
            ));
        }
        if self.knn_sample <= self.knn_k {
            let why = format!(
                "k = {} is not smaller than the sample of {} sequences",
                self.knn_k, self.knn_sample
            );
            return Err(LmdError::measure(Measure::MutualKnn.name(), why));
        }
        Ok(())
    }
}

/// One measure over every pair of models, with its null.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasureResult {
    /// Which measure.
    pub measure: Measure,
    /// The measure between the models as paired (symmetric unless [`Measure::directed`];
    /// the diagonal is [`Measure::best`]).
    pub values: PairMatrix,
    /// The same measure with the pairing of sequences broken.
    pub null: PairMatrix,
}

impl MeasureResult {
    /// (value − null) / (best − null) of the pair (row, col): 1 at the best, 0 at the null
    /// (NaN when the null is the best value).
    pub fn calibrated(&self, row: usize, col: usize) -> f64 {
        let (v, z) = (self.values.get(row, col), self.null.get(row, col));
        (v - z) / (self.measure.best() - z)
    }
}

/// Every measure of one study (one T, one test split).
#[derive(Clone, Debug, PartialEq)]
pub struct Similarity {
    /// Model names.
    pub names: Vec<String>,
    /// Test sequences the streamed measures saw.
    pub n_test: u64,
    /// The settings.
    pub params: SimilarityParams,
    /// One entry per measure, in report order.
    pub results: Vec<MeasureResult>,
    /// Measures that could not be computed on this data ([`LmdError::Measure`]: too few
    /// sequences for the widths, zero variance, ...) with the sentence saying why.
    pub left_out: Vec<(Measure, String)>,
}

impl Similarity {
    /// The result of `measure`, if computed.
    pub fn get(&self, measure: Measure) -> Option<&MeasureResult> {
        self.results.iter().find(|r| r.measure == measure)
    }
}

/// Every streamed measure ([`Measure::STREAMED`]) and, when `sample` is given, mutual k-NN.
/// `train` and `test` must track similarity ([`Moments::track_similarity`]). A measure that
/// cannot be computed on this data (its [`LmdError::Measure`]) is listed in
/// [`Similarity::left_out`] with its sentence; any other error is returned.
pub fn similarity(
    train: &Moments,
    test: &Moments,
    sample: Option<&KnnSample>,
    params: &SimilarityParams,
) -> Result<Similarity> {
    params.check()?;
    let (mut results, mut left_out) = (Vec::new(), Vec::new());
    let mut keep = |measure: Measure, r: Result<MeasureResult>| match r {
        Ok(r) => {
            results.push(r);
            Ok(())
        }
        Err(e @ LmdError::Measure { .. }) => {
            left_out.push((measure, e.to_string()));
            Ok(())
        }
        Err(e) => Err(e),
    };
    for m in Measure::STREAMED {
        keep(m, streamed_measure(m, train, test, params))?;
    }
    if let Some(s) = sample {
        keep(Measure::MutualKnn, mutual_knn(s, params.knn_k, params.seed))?;
    }
    Ok(Similarity {
        names: test.names().to_vec(),
        n_test: test.n(),
        params: params.clone(),
        results,
        left_out,
    })
}

/// One streamed measure (every one but [`Measure::MutualKnn`]) over every pair, with its null.
/// `train` is read by [`Measure::HeldOutR2`] only. Errors name the measure.
pub fn streamed_measure(
    measure: Measure,
    train: &Moments,
    test: &Moments,
    params: &SimilarityParams,
) -> Result<MeasureResult> {
    params.check()?;
    let name = measure.name();
    let no_null = |split: &str| {
        LmdError::measure(
            name,
            format!(
                "the {split} moments hold no null (accumulate them with Moments::track_similarity)"
            ),
        )
    };
    let test_null = test.null().ok_or_else(|| no_null("test"))?;
    if measure == Measure::HeldOutR2 {
        let train_null = train.null().ok_or_else(|| no_null("train"))?;
        let wrap = |e: LmdError| LmdError::measure(name, e.to_string());
        return Ok(MeasureResult {
            measure,
            values: pairwise_r2(train, test, params.ridge).map_err(wrap)?,
            null: pairwise_r2(train_null, test_null, params.ridge).map_err(wrap)?,
        });
    }
    let names = test.names();
    let k = names.len();
    let n = test.n();
    need_rows(name, n, 2, "a covariance")?;
    let own = own_blocks(test);
    // Zero variance: a trace at the rounding level of the values about the shift.
    let shift = test.shift();
    let zero = |i: usize| {
        let scale: f64 = test.range(i).map(|c| shift[c] * shift[c]).sum();
        own[i].trace.is_nan() || own[i].trace <= 1e-28 * (1.0 + scale)
    };
    if let Some(i) = (0..k).find(|&i| zero(i)) {
        return Err(zero_variance(name, &names[i]));
    }
    let per_pair: PairFn<'_> = match measure {
        Measure::LinearCka => Box::new(move |m: &Moments, _: Pairing, i: usize, j: usize| {
            Ok(linear_cka(cross(m, i, j).as_ref(), &own[i], &own[j]))
        }),
        Measure::DebiasedCka => debiased(test, own, name)?,
        Measure::MeanCca => {
            for (i, w) in test.widths().iter().enumerate() {
                if params.cca_ridge == 0.0 {
                    let why = format!("the covariance of {} (d = {w}) is singular", names[i]);
                    need_rows(name, n, *w as u64 + 1, &why)?;
                }
            }
            let factors = own
                .iter()
                .zip(names)
                .map(|(o, nm)| cholesky(&o.cov, params.cca_ridge, name, nm))
                .collect::<Result<Vec<_>>>()?;
            Box::new(move |m: &Moments, _: Pairing, i: usize, j: usize| {
                mean_canonical(
                    cross(m, i, j).as_ref(),
                    factors[i].as_ref(),
                    factors[j].as_ref(),
                    name,
                )
            })
        }
        Measure::Svcca => {
            let kd = params.svcca_dims;
            if let Some(i) = test.widths().iter().position(|&w| w < kd) {
                let why = format!(
                    "{} directions kept but {} has width {}",
                    kd,
                    names[i],
                    test.widths()[i]
                );
                return Err(LmdError::measure(name, why));
            }
            need_rows(name, n, kd as u64 + 1, "k directions of non-zero variance")?;
            let bases = own
                .iter()
                .zip(names)
                .map(|(o, nm)| svcca_basis(&o.cov, kd, nm))
                .collect::<Result<Vec<_>>>()?;
            Box::new(move |m: &Moments, _: Pairing, i: usize, j: usize| {
                let c = cross(m, i, j);
                let p: Mat<f64> = bases[i].transpose() * c.as_ref() * bases[j].as_ref();
                mean_singular(p.as_ref(), name)
            })
        }
        Measure::Procrustes => Box::new(move |m: &Moments, _: Pairing, i: usize, j: usize| {
            procrustes(cross(m, i, j).as_ref(), own[i].trace, own[j].trace)
        }),
        Measure::HeldOutR2 | Measure::MutualKnn => {
            return Err(LmdError::measure(
                name,
                "it is not computed from moments alone",
            ))
        }
    };
    let mut values = vec![measure.best(); k * k];
    let mut null = vec![measure.best(); k * k];
    for i in 0..k {
        for j in 0..i {
            let v = per_pair(test, Pairing::Paired, i, j)?;
            let z = per_pair(test_null, Pairing::Broken, i, j)?;
            (values[i * k + j], values[j * k + i]) = (v, v);
            (null[i * k + j], null[j * k + i]) = (z, z);
        }
    }
    let matrix = |values| PairMatrix {
        names: names.to_vec(),
        values,
    };
    Ok(MeasureResult {
        measure,
        values: matrix(values),
        null: matrix(null),
    })
}

/// Which rows a pair measure reads: as paired, or with the pairing broken.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pairing {
    Paired,
    Broken,
}

/// A measure of the pair (i, j) from the given moments and pairing.
type PairFn<'a> = Box<dyn Fn(&Moments, Pairing, usize, usize) -> Result<f64> + 'a>;

/// Debiased CKA of every pair: HSIC₁ of the pair over the HSIC₁ of each model with itself
/// (its own rows, the same in both pairings).
fn debiased<'a>(test: &Moments, own: Vec<Own>, name: &'a str) -> Result<PairFn<'a>> {
    let n = test.n();
    need_rows(name, n, 4, "the unbiased HSIC divides by n − 3")?;
    let k = test.names().len();
    let streams = test.streams().ok_or_else(|| {
        let why = "the test moments hold no norm moments (Moments::track_similarity)";
        LmdError::measure(name, why)
    })?;
    let q_paired = measures::centred_q(test, &streams.norms);
    let q_broken = measures::centred_q(&streams.null, &streams.null_norms);
    let nf = n as f64;
    let self_hsic: Vec<f64> = (0..k)
        .map(|i| {
            let (c2, tr) = (own[i].cov.squared_norm_l2(), own[i].trace);
            hsic_unbiased(nf, c2, tr, tr, q_paired[i * k + i])
        })
        .collect();
    if let Some(i) = self_hsic.iter().position(|h| h.is_nan() || *h <= 0.0) {
        let why = format!(
            "the unbiased HSIC of {} with itself is {:.3e} ≤ 0 at n = {n} (too few sequences)",
            test.names()[i],
            self_hsic[i]
        );
        return Err(LmdError::measure(name, why));
    }
    Ok(Box::new(
        move |m: &Moments, side: Pairing, i: usize, j: usize| {
            let q = match side {
                Pairing::Paired => &q_paired,
                Pairing::Broken => &q_broken,
            };
            let c2 = cross(m, i, j).squared_norm_l2();
            let h = hsic_unbiased(nf, c2, own[i].trace, own[j].trace, q[i * k + j]);
            Ok(h / (self_hsic[i] * self_hsic[j]).sqrt())
        },
    ))
}
