//! AdamW's update on CUDA: one kernel launch per parameter (`adamw.cu`) where the composed
//! update launches about a dozen, with the CPU's f32 arithmetic bit for bit
//! ([`crate::training::optim`]'s `adamw_elem`); and gradient-norm clipping with AdamW over all
//! parameters in three launches (`adamw_multi.cu`), the norm kept on the device until the
//! update has been launched.

use candle_core::cuda_backend::cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::{DType, Tensor};

use crate::ops::adamw::update_table::{multi_table, writes_disjoint};
use crate::ops::cuda::{grid, ptx, row_grid, tensor, with_cuda_f32, written_whole};
use crate::Result;

/// The kernel's PTX, from `build.rs`.
const PTX: &str = ptx!("adamw");

/// The op's name, in its errors.
const OP: &str = "adamw";

/// The update of θ from its gradient g and moments m, v in one launch, with the update's ten
/// scalars `k` in `adamw.cu`'s argument order (grad_scale, b1, 1 − b1, b2, 1 − b2, 1/bc1,
/// 1/bc2, eps, keep, lr): (θ', m', v') as new tensors; `None` unless all four are contiguous
/// f32 CUDA tensors of one size.
pub(crate) fn cuda_update(
    theta: &Tensor,
    g: &Tensor,
    m: &Tensor,
    v: &Tensor,
    k: &[f32; 10],
) -> Result<Option<(Tensor, Tensor, Tensor)>> {
    let ts = [theta, g, m, v];
    let n = theta.elem_count();
    let applies = |t: &&Tensor| {
        t.device().is_cuda() && t.dtype() == DType::F32 && t.elem_count() == n && t.is_contiguous()
    };
    if !ts.iter().all(applies) || i32::try_from(n).is_err() {
        return Ok(None);
    }
    let updated = with_cuda_f32(&ts, OP, |dev, views| {
        // SAFETY: the kernel writes all n entries of the three.
        let (mut theta_out, mut m_out, mut v_out) = unsafe {
            (
                written_whole::<f32>(dev, n)?,
                written_whole::<f32>(dev, n)?,
                written_whole::<f32>(dev, n)?,
            )
        };
        if n > 0 {
            let step = dev.get_or_load_custom_func("adamw_step", "lmsplit_adamw", PTX)?;
            let n_i = n as i64;
            let mut launch = step.builder();
            launch
                .arg(&views[0])
                .arg(&views[1])
                .arg(&views[2])
                .arg(&views[3])
                .arg(&mut theta_out)
                .arg(&mut m_out)
                .arg(&mut v_out)
                .arg(&n_i);
            for c in k {
                launch.arg(c);
            }
            // SAFETY: the arguments match the kernel's signature in adamw.cu, and it touches the
            // first n elements of seven buffers of n.
            unsafe { launch.launch(grid(n)) }.w()?;
        }
        let shape = theta.shape();
        Ok((
            tensor(theta_out, dev, shape.clone()),
            tensor(m_out, dev, shape.clone()),
            tensor(v_out, dev, shape.clone()),
        ))
    })?;
    Ok(Some(updated))
}

/// The multi-tensor kernels' PTX, from `build.rs`.
const MULTI_PTX: &str = ptx!("adamw_multi");

/// The multi-tensor op's name, in its errors.
const MULTI_OP: &str = "adamw_multi";

/// Elements of a chunk, one warp's share of a parameter (64 a lane): 32,000 chunks for 64M
/// parameters, so the sum's second launch adds about a thousand partials a lane.
const CHUNK: usize = 2048;

/// Gradient-norm clipping to `max_norm` (≤ 0: none) and AdamW over every parameter of `rows`
/// ([θ, g, m, v] each) in place, in three launches (`adamw_multi.cu`): the sums of squares,
/// the norm and clip factor (left on the device), the update reading the factor. `keep` is
/// each parameter's 1 − lr·λ, `k` the shared scalars (b1, 1 − b1, b2, 1 − b2, 1/bc1, 1/bc2,
/// eps, lr). Returns the norm before clipping, read back after the update was launched (not
/// finite: nothing was written); `None`, with nothing launched, unless every tensor is a
/// contiguous f32 tensor of its row's size on one CUDA device, no buffer written overlaps
/// another, and some parameter has elements.
pub(crate) fn cuda_update_all(
    rows: &[[&Tensor; 4]],
    keep: &[f32],
    k: &[f32; 8],
    max_norm: f64,
) -> Result<Option<f64>> {
    // Parameters without elements have nothing to update or add to the norm.
    let (rows, keep): (Vec<[&Tensor; 4]>, Vec<f32>) = rows
        .iter()
        .zip(keep)
        .filter(|(r, _)| r[0].elem_count() > 0)
        .map(|(r, &kp)| (*r, kp))
        .unzip();
    let Some(first) = rows.first().map(|r| r[0]) else {
        return Ok(None);
    };
    let applies = |r: &[&Tensor; 4]| {
        r.iter().all(|t| {
            t.device().same_device(first.device())
                && t.dtype() == DType::F32
                && t.is_contiguous()
                && t.elem_count() == r[0].elem_count()
        })
    };
    let Ok(count) = i32::try_from(rows.len()) else {
        return Ok(None);
    };
    if !first.device().is_cuda() || !rows.iter().all(applies) {
        return Ok(None);
    }
    let all: Vec<&Tensor> = rows.iter().flatten().copied().collect();
    let done = with_cuda_f32(&all, MULTI_OP, |dev, views| {
        let stream = dev.cuda_stream();
        // The addresses, each with cudarc's guard held until the launches are queued (it
        // records the access for other streams, where cudarc tracks them).
        let (addrs, _guards): (Vec<u64>, Vec<_>) =
            views.iter().map(|v| v.device_ptr(&stream)).unzip();
        let mut ranges: Vec<(u64, u64, bool)> = addrs
            .iter()
            .zip(&all)
            .enumerate()
            .map(|(j, (&a, t))| (a, a + 4 * t.elem_count() as u64, j % 4 != 1))
            .collect();
        if !writes_disjoint(&mut ranges) {
            return Ok(None);
        }
        let table_rows: Vec<([u64; 4], usize, f32)> = addrs
            .chunks_exact(4)
            .zip(rows.iter().zip(&keep))
            .map(|(a, (r, &kp))| ([a[0], a[1], a[2], a[3]], r[0].elem_count(), kp))
            .collect();
        let (words, chunks) = multi_table(&table_rows, CHUNK);
        // A warp per chunk, in a grid that `row_grid` counts in 32 bits.
        if i32::try_from(chunks).is_err() {
            return Ok(None);
        }
        let (chunks_i, chunk_i) = (chunks as i64, CHUNK as i64);
        let table = dev.clone_htod(&words)?;
        // SAFETY: the sum writes a partial for each of the `chunks` chunks, and the clip
        // kernel both entries.
        let (mut partial, mut norm_clip) = unsafe {
            (
                written_whole::<f64>(dev, chunks as usize)?,
                written_whole::<f64>(dev, 2)?,
            )
        };
        let sum_sq =
            dev.get_or_load_custom_func("adamw_multi_sum_sq", "lmsplit_adamw_multi", MULTI_PTX)?;
        let clip =
            dev.get_or_load_custom_func("adamw_multi_clip", "lmsplit_adamw_multi", MULTI_PTX)?;
        let step =
            dev.get_or_load_custom_func("adamw_multi_step", "lmsplit_adamw_multi", MULTI_PTX)?;
        let mut launch = sum_sq.builder();
        launch
            .arg(&table)
            .arg(&count)
            .arg(&chunks_i)
            .arg(&chunk_i)
            .arg(&mut partial);
        // SAFETY: the arguments match adamw_multi_sum_sq's signature; the table holds `count`
        // rows of live f32 buffers of their rows' sizes (the read guards are held), and a warp
        // per chunk reads only its chunk's elements.
        unsafe { launch.launch(row_grid(chunks as usize)) }.w()?;
        let mut launch = clip.builder();
        launch
            .arg(&partial)
            .arg(&chunks_i)
            .arg(&max_norm)
            .arg(&mut norm_clip);
        let one_warp = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match adamw_multi_clip's signature; it reads the `chunks`
        // partials and writes two doubles.
        unsafe { launch.launch(one_warp) }.w()?;
        let mut launch = step.builder();
        launch
            .arg(&table)
            .arg(&count)
            .arg(&chunks_i)
            .arg(&chunk_i)
            .arg(&norm_clip);
        for c in k {
            launch.arg(c);
        }
        // SAFETY: the arguments match adamw_multi_step's signature. It writes θ, m and v in
        // place through the table's addresses, each element from one thread, in buffers that
        // overlap no other (checked above); everything else on this device runs on the same
        // stream, so earlier reads of the parameters finish before and later ones start after,
        // as with the copy of `Var::set`.
        unsafe { launch.launch(row_grid(chunks as usize)) }.w()?;
        // The one read of the step, after the update is queued.
        let out = dev.clone_dtoh(&norm_clip)?;
        Ok(out.first().copied())
    })?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PTX holds the three kernels the update loads.
    #[test]
    fn the_multi_tensor_ptx_holds_its_kernels() {
        for k in ["adamw_multi_sum_sq", "adamw_multi_clip", "adamw_multi_step"] {
            assert!(MULTI_PTX.contains(&format!(".entry {k}(")), "{k} missing");
        }
    }
}
