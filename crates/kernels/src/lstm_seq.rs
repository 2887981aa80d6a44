//! A whole-sequence LSTM layer (PyTorch gate order i, f, g, o) and its backward pass through
//! time, on row-major [B, T, ·] slices. Per step, the recurrent product h_{t−1} W_hhᵀ is one
//! faer GEMM ([`par::gemm_cols`]: B rows, the columns shared out over the pool) added onto the
//! precomputed input part, and the elementwise step is [`lstm_cell_forward`] per row (rows
//! shared out over the pool). Backward runs the steps in reverse with [`lstm_cell_backward`]
//! and dh_{t−1} = dgates_t W_hh per step; dW_hh is one GEMM over all steps at the end.
//!
//! A mask m ∈ {0, 1} per (sequence, step) multiplies the new state, h_t = m·h′_t and
//! c_t = m·c′_t, so the step after a PAD starts from zeros.

use faer::{Accum, MatMut, MatRef};

use crate::lstm::{lstm_cell_backward, lstm_cell_forward};
use crate::par;

/// What [`LstmSeq::forward`] wrote and its backward pass reads: the gate pre-activations
/// `gates` [B, T, 4C], the output `h` and the cell state `c` [B, T, C].
#[derive(Debug, Clone, Copy)]
pub struct LstmSaved<'a> {
    /// Gate pre-activations.
    pub gates: &'a [f32],
    /// Output h.
    pub h: &'a [f32],
    /// Cell state c.
    pub c: &'a [f32],
}

/// The shape of a whole-sequence LSTM layer: `batch` sequences of `steps` steps, cell width
/// `cell` (C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LstmSeq {
    /// B, the number of sequences.
    pub batch: usize,
    /// T, the number of steps.
    pub steps: usize,
    /// C, the cell width (the gates are 4C wide).
    pub cell: usize,
}

/// Runs `f(b)` for every sequence b, the sequences shared out over the pool in consecutive
/// ranges. `f` may only touch sequence b's rows.
fn for_each_sequence(batch: usize, f: impl Fn(usize) + Sync) {
    let parts = par::threads().min(batch).max(1);
    let per = batch.div_ceil(parts);
    par::for_each_part(parts, |p| {
        for b in p * per..batch.min((p + 1) * per) {
            f(b)
        }
    });
}

impl LstmSeq {
    fn check(&self, gates: usize, w_hh: usize, mask: usize, states: &[usize]) {
        let (n, c) = (self.batch * self.steps, self.cell);
        assert_eq!(gates, n * 4 * c, "lstm-seq: gates length");
        assert_eq!(w_hh, 4 * c * c, "lstm-seq: W_hh length");
        assert_eq!(mask, n, "lstm-seq: mask length");
        for &s in states {
            assert_eq!(s, n * c, "lstm-seq: state length");
        }
    }

    /// The forward pass. From the input part of the gates `gx` [B, T, 4C] (W_ih x_t + b), the
    /// recurrent weight `w_hh` [4C, C] and `mask` [B, T] (1 real, 0 PAD), writes the gate
    /// pre-activations `gates` [B, T, 4C] and the states after the mask `h`, `c` [B, T, C]
    /// (h is the layer's output; gates and c are what [`LstmSeq::backward`] needs). The
    /// state before step 0 is zero.
    pub fn forward(
        &self,
        gx: &[f32],
        w_hh: &[f32],
        mask: &[f32],
        gates: &mut [f32],
        h: &mut [f32],
        c: &mut [f32],
    ) {
        self.check(gx.len(), w_hh.len(), mask.len(), &[h.len(), c.len()]);
        assert_eq!(gates.len(), gx.len(), "lstm-seq: gates length");
        let (bn, tn, cell) = (self.batch, self.steps, self.cell);
        if bn * tn * cell == 0 {
            return;
        }
        gates.copy_from_slice(gx);
        let w_t = MatRef::from_row_major_slice(w_hh, 4 * cell, cell).transpose();
        let zeros = vec![0f32; cell];
        for t in 0..tn {
            if t > 0 {
                let hp = MatRef::from_row_major_slice_with_stride(
                    &h[(t - 1) * cell..],
                    bn,
                    cell,
                    tn * cell,
                );
                // Written as the transpose of a column-major view: faer 0.24.4's
                // `from_row_major_slice_with_stride_mut` swaps the two strides.
                let g = MatMut::from_column_major_slice_with_stride_mut(
                    &mut gates[t * 4 * cell..],
                    4 * cell,
                    bn,
                    tn * 4 * cell,
                )
                .transpose_mut();
                par::gemm_cols(g, Accum::Add, hp, w_t, 1.0);
            }
            let gates = &*gates;
            let (hs, cs) = (par::pieces(h, tn * cell), par::pieces(c, tn * cell));
            for_each_sequence(bn, |b| {
                let (mut hb, mut cb) = (par::take(&hs[b]), par::take(&cs[b]));
                let (before, now) = cb.split_at_mut(t * cell);
                let c_prev = if t > 0 {
                    &before[(t - 1) * cell..]
                } else {
                    &zeros[..]
                };
                let (c_now, h_now) = (&mut now[..cell], &mut hb[t * cell..(t + 1) * cell]);
                let row = (b * tn + t) * 4 * cell;
                lstm_cell_forward(&gates[row..row + 4 * cell], c_prev, cell, h_now, c_now);
                let m = mask[b * tn + t];
                for (hv, cv) in h_now.iter_mut().zip(c_now.iter_mut()) {
                    *hv *= m;
                    *cv *= m;
                }
            });
        }
    }

    /// The backward pass of [`LstmSeq::forward`], from what it `saved` and the gradient `dh`
    /// [B, T, C] of the output h: writes the gradient of the input part `dgx` [B, T, 4C]
    /// (which is also that of the gate pre-activations) and of the recurrent weight `dw_hh`
    /// [4C, C] (overwritten).
    pub fn backward(
        &self,
        w_hh: &[f32],
        mask: &[f32],
        saved: LstmSaved<'_>,
        dh: &[f32],
        dgx: &mut [f32],
        dw_hh: &mut [f32],
    ) {
        let LstmSaved { gates, h, c } = saved;
        self.check(
            gates.len(),
            w_hh.len(),
            mask.len(),
            &[h.len(), c.len(), dh.len()],
        );
        assert_eq!(dgx.len(), gates.len(), "lstm-seq: dgx length");
        assert_eq!(dw_hh.len(), w_hh.len(), "lstm-seq: dW_hh length");
        let (bn, tn, cell) = (self.batch, self.steps, self.cell);
        dw_hh.fill(0.0);
        if bn * tn * cell == 0 {
            dgx.fill(0.0);
            return;
        }
        let w = MatRef::from_row_major_slice(w_hh, 4 * cell, cell);
        let zeros = vec![0f32; cell];
        // The gradients reaching h_t through step t + 1's recurrent GEMM, and c_t through its
        // cell update.
        let mut dh_next = vec![0f32; bn * cell];
        let mut dc_next = vec![0f32; bn * cell];
        for t in (0..tn).rev() {
            {
                let dh_next = &dh_next;
                let (dgs, dcs) = (
                    par::pieces(dgx, tn * 4 * cell),
                    par::pieces(&mut dc_next, cell),
                );
                for_each_sequence(bn, |b| {
                    let (mut dgb, mut dcb) = (par::take(&dgs[b]), par::take(&dcs[b]));
                    let m = mask[b * tn + t];
                    let at = (b * tn + t) * cell;
                    let next = &dh_next[b * cell..(b + 1) * cell];
                    // Through h_t = m·h′_t and c_t = m·c′_t.
                    let dh2: Vec<f32> = dh[at..at + cell]
                        .iter()
                        .zip(next)
                        .map(|(&a, &n)| (a + n) * m)
                        .collect();
                    let dc2: Vec<f32> = dcb.iter().map(|&d| d * m).collect();
                    let c_prev = if t > 0 { &c[at - cell..at] } else { &zeros[..] };
                    let row = 4 * at;
                    lstm_cell_backward(
                        &gates[row..row + 4 * cell],
                        c_prev,
                        cell,
                        &dh2,
                        &dc2,
                        &mut dgb[t * 4 * cell..(t + 1) * 4 * cell],
                        &mut dcb,
                    );
                });
            }
            if t > 0 {
                let dg = MatRef::from_row_major_slice_with_stride(
                    &dgx[t * 4 * cell..],
                    bn,
                    4 * cell,
                    tn * 4 * cell,
                );
                let dst = MatMut::from_row_major_slice_mut(&mut dh_next, bn, cell);
                par::gemm_cols(dst, Accum::Replace, dg, w, 1.0);
            }
        }
        // dW_hh = Σ_t dgates_tᵀ h_{t−1}: one GEMM over all (sequence, step) rows, against h
        // shifted one step (zeros before step 0).
        let mut h_prev = vec![0f32; h.len()];
        for (hp, hb) in h_prev
            .chunks_exact_mut(tn * cell)
            .zip(h.chunks_exact(tn * cell))
        {
            hp[cell..].copy_from_slice(&hb[..(tn - 1) * cell]);
        }
        par::gemm(
            MatMut::from_row_major_slice_mut(dw_hh, 4 * cell, cell),
            Accum::Replace,
            MatRef::from_row_major_slice(dgx, bn * tn, 4 * cell).transpose(),
            MatRef::from_row_major_slice(&h_prev, bn * tn, cell),
            1.0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// f64 reference of the masked recurrence: the loss Σ wh·h over all steps, from gx and
    /// W_hh (both [B, T, 4C] / [4C, C] row-major).
    fn loss_f64(s: LstmSeq, gx: &[f64], w_hh: &[f64], mask: &[f32], wh: &[f64]) -> f64 {
        let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
        let (bn, tn, cell) = (s.batch, s.steps, s.cell);
        let mut loss = 0.0;
        for b in 0..bn {
            let (mut h, mut c) = (vec![0.0; cell], vec![0.0; cell]);
            for t in 0..tn {
                let g = &gx[(b * tn + t) * 4 * cell..][..4 * cell];
                let a: Vec<f64> = (0..4 * cell)
                    .map(|j| g[j] + (0..cell).map(|k| w_hh[j * cell + k] * h[k]).sum::<f64>())
                    .collect();
                let m = mask[b * tn + t] as f64;
                for k in 0..cell {
                    let cn = sig(a[cell + k]) * c[k] + sig(a[k]) * a[2 * cell + k].tanh();
                    h[k] = m * sig(a[3 * cell + k]) * cn.tanh();
                    c[k] = m * cn;
                }
                for k in 0..cell {
                    loss += wh[(b * tn + t) * cell + k] * h[k];
                }
            }
        }
        loss
    }

    fn pseudo(n: usize, seed: usize, scale: f64) -> Vec<f64> {
        (0..n)
            .map(|i| ((((i * 7919 + seed * 104_729) % 1009) as f64 / 504.5) - 1.0) * scale)
            .collect()
    }

    #[test]
    fn sequence_and_its_gradients_match_f64_finite_differences() {
        // PAD at the start of sequence 0, in the middle of sequence 1, none in sequence 2.
        let s = LstmSeq {
            batch: 3,
            steps: 5,
            cell: 3,
        };
        let mask = [0., 1., 1., 1., 1., 1., 1., 0., 1., 1., 1., 1., 1., 1., 1.];
        let (n, cell) = (s.batch * s.steps, s.cell);
        let gx64 = pseudo(n * 4 * cell, 1, 1.5);
        let w64 = pseudo(4 * cell * cell, 2, 0.8);
        let wh = pseudo(n * cell, 3, 1.0);
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        // Round the inputs to f32 so both sides see the same numbers.
        let (gx, w) = (f32s(&gx64), f32s(&w64));
        let gx64: Vec<f64> = gx.iter().map(|&x| x as f64).collect();
        let w64: Vec<f64> = w.iter().map(|&x| x as f64).collect();
        let (mut gates, mut h, mut c) = (
            vec![0.; n * 4 * cell],
            vec![0.; n * cell],
            vec![0.; n * cell],
        );
        s.forward(&gx, &w, &mask, &mut gates, &mut h, &mut c);
        let loss: f64 = h.iter().zip(&wh).map(|(&a, &b)| a as f64 * b).sum();
        let want = loss_f64(s, &gx64, &w64, &mask, &wh);
        assert!((loss - want).abs() < 1e-5, "loss {loss} vs {want}");
        for (b, t) in [(0, 0), (1, 2)] {
            let at = (b * s.steps + t) * cell;
            assert!(
                h[at..at + cell].iter().all(|&v| v == 0.0),
                "PAD state not zero"
            );
        }
        let (mut dgx, mut dw) = (vec![0.; gx.len()], vec![0.; w.len()]);
        let saved = LstmSaved {
            gates: &gates,
            h: &h,
            c: &c,
        };
        s.backward(&w, &mask, saved, &f32s(&wh), &mut dgx, &mut dw);
        let check = |name: &str, got: &[f32], base: &[f64], at: &dyn Fn(&[f64]) -> f64| {
            let e = 1e-6;
            let mut nonzero = 0;
            for j in 0..base.len() {
                let (mut p, mut m) = (base.to_vec(), base.to_vec());
                p[j] += e;
                m[j] -= e;
                let fd = (at(&p) - at(&m)) / (2.0 * e);
                let g = got[j] as f64;
                assert!(
                    (g - fd).abs() < 2e-5 * (1.0 + fd.abs()),
                    "{name}[{j}] {g} vs {fd}"
                );
                nonzero += usize::from(fd.abs() > 1e-3);
            }
            assert!(
                nonzero > base.len() / 2,
                "{name}: too few non-zero gradients"
            );
        };
        check("dgx", &dgx, &gx64, &|g| loss_f64(s, g, &w64, &mask, &wh));
        check("dw_hh", &dw, &w64, &|w| loss_f64(s, &gx64, w, &mask, &wh));
    }

    #[test]
    fn forward_and_backward_are_bit_identical_run_to_run() {
        let s = LstmSeq {
            batch: 4,
            steps: 6,
            cell: 150,
        };
        let (n, cell) = (s.batch * s.steps, s.cell);
        let f32s = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
        let gx = f32s(pseudo(n * 4 * cell, 4, 2.0));
        let w = f32s(pseudo(4 * cell * cell, 5, 0.1));
        let dh = f32s(pseudo(n * cell, 6, 1.0));
        let mask: Vec<f32> = (0..n).map(|i| f32::from(i % 5 != 3)).collect();
        let run = || {
            let (mut gates, mut h, mut c) = (
                vec![0.; n * 4 * cell],
                vec![0.; n * cell],
                vec![0.; n * cell],
            );
            s.forward(&gx, &w, &mask, &mut gates, &mut h, &mut c);
            let (mut dgx, mut dw) = (vec![0.; gx.len()], vec![0.; w.len()]);
            let saved = LstmSaved {
                gates: &gates,
                h: &h,
                c: &c,
            };
            s.backward(&w, &mask, saved, &dh, &mut dgx, &mut dw);
            (h, dgx, dw)
        };
        let first = run();
        for _ in 0..3 {
            assert!(run() == first);
        }
    }
}
