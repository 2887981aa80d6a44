//! Seeded draws shared by the unit tests of the analysis modules.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A standard normal draw (Box–Muller), so that planted test data follow one seeded stream.
pub(crate) fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let (u, v): (f64, f64) = (rng.random::<f64>().max(1e-12), rng.random());
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}
