//! The elementwise part of an LSTM step as one CPU custom op with its backward pass. Written
//! from tensor ops the step is a dozen passes forward (three composed sigmoids, two tanh,
//! products and sums) and about twice that backward, on [B, C] tensors small enough that
//! candle's per-op cost dominates the ELMo towers; here each direction is one pass
//! ([`kernels::lstm_cell_forward`], [`kernels::lstm_cell_backward`]). [`crate::lstm::lstm_cell`]
//! without it is the reference in the tests.

use candle_core::{CpuStorage, CustomOp2, Device, Layout, Shape, Tensor};
use kernels::host::{f32_data, not_host_f32, with_host_f32};

/// The custom op: gate pre-activations [B, 4C] and the previous cell state [B, C] (contiguous
/// f32) to [2, B, C] = (h, c).
pub(crate) struct FusedLstmCell;

fn dims(gates: &Shape, c_prev: &Shape) -> candle_core::Result<(usize, usize)> {
    let (b, c4) = gates.dims2()?;
    if c_prev.dims() != [b, c4 / 4] || c4 % 4 != 0 {
        candle_core::bail!("fused-lstm-cell: gates {gates:?}, c_prev {c_prev:?}")
    }
    Ok((b, c4 / 4))
}

impl CustomOp2 for FusedLstmCell {
    fn name(&self) -> &'static str {
        "fused-lstm-cell"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, cell) = dims(l1.shape(), l2.shape())?;
        let op = "fused-lstm-cell";
        let (gates, c_prev) = (f32_data(s1, l1, op)?, f32_data(s2, l2, op)?);
        let mut out = vec![0f32; 2 * b * cell];
        let (h, c) = out.split_at_mut(b * cell);
        kernels::lstm_cell_forward(gates, c_prev, cell, h, c);
        Ok((CpuStorage::F32(out), Shape::from((2, b, cell))))
    }

    fn bwd(
        &self,
        gates: &Tensor,
        c_prev: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (b, cell) = dims(gates.shape(), c_prev.shape())?;
        let d = grad_res.to_dtype(candle_core::DType::F32)?.contiguous()?;
        let (dg, dc) = with_host_f32(&[gates, c_prev, &d], |s| {
            let (dh, dc) = s[2].split_at(b * cell);
            let (mut dg, mut dcp) = (vec![0f32; 4 * b * cell], vec![0f32; b * cell]);
            kernels::lstm_cell_backward(s[0], s[1], cell, dh, dc, &mut dg, &mut dcp);
            (dg, dcp)
        })
        .ok_or_else(|| not_host_f32("fused-lstm-cell"))?;
        let dev = Device::Cpu;
        Ok((
            Some(Tensor::from_vec(dg, (b, 4 * cell), &dev)?),
            Some(Tensor::from_vec(dc, (b, cell), &dev)?),
        ))
    }
}
