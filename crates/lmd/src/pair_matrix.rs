//! The model × model matrices of LMD (pairwise R², ρ, CKA, CCA).

/// A square matrix over models, row-major; for R², rows = target and columns = basis.
#[derive(Clone, Debug, PartialEq)]
pub struct PairMatrix {
    /// Model names (row and column order).
    pub names: Vec<String>,
    /// Values, row-major, names.len()².
    pub values: Vec<f64>,
}

impl PairMatrix {
    /// Number of models.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when there are no models.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Value at (row, column).
    pub fn get(&self, row: usize, col: usize) -> f64 {
        self.values[row * self.len() + col]
    }

    /// (M + Mᵀ) / 2: pairwise ρ(u, v) = (R²(u, v) + R²(v, u)) / 2 when self holds pairwise R².
    pub fn symmetrized(&self) -> PairMatrix {
        let m = self.len();
        PairMatrix {
            names: self.names.clone(),
            values: (0..m * m)
                .map(|k| 0.5 * (self.values[k] + self.values[(k % m) * m + k / m]))
                .collect(),
        }
    }
}
