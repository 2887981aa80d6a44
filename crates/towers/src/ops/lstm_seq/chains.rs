//! The shape of a layer's LSTM chains run as one op (the directions of its towers), shared by
//! the op's CPU reference (`fused_lstm_seq`) and its CUDA side (`fused_lstm_seq_cuda`).

use kernels::LstmSeq;

/// The shape of a layer's chains run as one op: `chains` recurrences of shape `seq` over one
/// mask, chain n reading time reversed (its step s at time T−1−s) when bit n of `reversed` is
/// set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chains {
    /// N, the number of chains.
    pub chains: usize,
    /// One chain's shape.
    pub seq: LstmSeq,
    /// Bit n set: chain n reads time reversed.
    pub reversed: u32,
}

impl Chains {
    /// The most chains one op takes (a bit each of `reversed`).
    pub(crate) const MAX: usize = 32;

    /// Whether chain `n` reads time reversed.
    pub(crate) fn is_reversed(&self, n: usize) -> bool {
        (self.reversed >> n) & 1 == 1
    }

    /// Elements of one chain's [B, T, C].
    pub(crate) fn states(&self) -> usize {
        self.seq.batch * self.seq.steps * self.seq.cell
    }
}
