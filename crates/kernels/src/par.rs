//! Parallel work of CPU custom ops on candle's own worker pool.
//!
//! candle runs its CPU ops on a pool whose workers spin for a while after each op before
//! parking. Custom ops that parallelise on other pools (rayon, faer's) then run with those
//! spinning workers competing for the same cores; on a 2-core machine that cost more than a
//! tenth of a training step. Running the ops' parallel parts on candle's pool instead keeps one
//! set of threads busy. The split is static (a fixed number of parts), so results do not
//! depend on the scheduling.

use std::sync::{Mutex, MutexGuard};

use candle_core::utils::barrier_pool;
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};

/// Threads that share the work: candle's workers plus the calling thread (`RAYON_NUM_THREADS`
/// or `CANDLE_NUM_THREADS`, else every core).
pub fn threads() -> usize {
    barrier_pool().n_workers() + 1
}

/// Runs `f(part)` for every part in `0..parts` on candle's CPU pool.
pub fn for_each_part(parts: usize, f: impl Fn(usize) + Sync) {
    if parts <= 1 {
        if parts == 1 {
            f(0);
        }
        return;
    }
    barrier_pool().execute_chunked(parts, |range| {
        for p in range {
            f(p)
        }
    });
}

/// `data` cut into consecutive `chunk`-long pieces, each behind its own lock, so that part p
/// of a [`for_each_part`] call can take piece p (see [`take`]).
pub fn pieces<T>(data: &mut [T], chunk: usize) -> Vec<Mutex<&mut [T]>> {
    data.chunks_mut(chunk.max(1)).map(Mutex::new).collect()
}

/// Locks one piece (each is taken by one part only, so this never waits).
pub fn take<'a, 'b, T>(piece: &'a Mutex<&'b mut [T]>) -> MutexGuard<'a, &'b mut [T]> {
    piece.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f(index, chunk)` on consecutive `chunk`-long pieces of `data` in parallel.
pub fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let all = pieces(data, chunk);
    for_each_part(all.len(), |p| f(p, &mut take(&all[p])));
}

/// dst ← alpha·lhs·rhs (+ dst with [`Accum::Add`]), split by rows of dst over the pool, each
/// block a sequential faer GEMM.
pub fn gemm(
    dst: MatMut<'_, f32>,
    accum: Accum,
    lhs: MatRef<'_, f32>,
    rhs: MatRef<'_, f32>,
    alpha: f32,
) {
    let m = dst.nrows();
    let (parts, rows) = row_blocks(m, threads());
    if parts == 1 {
        matmul(dst, accum, lhs, rhs, alpha, Par::Seq);
        return;
    }
    let mut blocks = Vec::with_capacity(parts);
    let mut rest = dst;
    for p in 0..parts {
        let take = if p + 1 == parts { m - p * rows } else { rows };
        let (top, bottom) = rest.split_at_row_mut(take);
        blocks.push(Mutex::new(top));
        rest = bottom;
    }
    for_each_part(parts, |p| {
        let mut block = blocks[p].lock().unwrap_or_else(|e| e.into_inner());
        // Rows of dst and lhs correspond one to one.
        let r0 = p * rows;
        let lhs_rows = lhs.subrows(r0, block.nrows());
        matmul(block.as_mut(), accum, lhs_rows, rhs, alpha, Par::Seq);
    });
}

/// The blocks of [`gemm`] for `m` rows on `threads` threads: how many, and the rows of each
/// but the last, which takes the rest. Below ~32 rows per thread the split costs more than it
/// saves. The count is recomputed from the block size: ⌈m / ⌈m / parts⌉⌉ can be smaller than
/// `parts` (48 threads, 1,220 rows: 38 asked, 37 blocks of 33), and a block past the end would
/// start beyond the last row. A last block of one row joins the one before it: faer multiplies
/// a one-row product as a matrix-vector product, with other bits, so that row would come out
/// differently than on fewer threads (from 33 threads on, e.g. 1,057 rows on 33).
fn row_blocks(m: usize, threads: usize) -> (usize, usize) {
    let parts = threads.min(m / 32).max(1);
    let rows = m.div_ceil(parts).max(1);
    let count = m.div_ceil(rows).max(1);
    match count > 1 && m - (count - 1) * rows == 1 {
        true => (count - 1, rows),
        false => (count, rows),
    }
}

/// Columns per block of [`gemm_cols`]. Fixed, so that the blocks, and with them the result, do
/// not depend on the number of threads.
const COL_BLOCK: usize = 128;

/// dst ← alpha·lhs·rhs (+ dst with [`Accum::Add`]) for products with few rows (the per-step
/// GEMMs of a recurrence have B rows, which [`gemm`] would leave on one thread): dst is cut into
/// fixed blocks of 128 columns, each a sequential faer GEMM, and the blocks are shared out over
/// the pool.
pub fn gemm_cols(
    dst: MatMut<'_, f32>,
    accum: Accum,
    lhs: MatRef<'_, f32>,
    rhs: MatRef<'_, f32>,
    alpha: f32,
) {
    let n = dst.ncols();
    let blocks = n.div_ceil(COL_BLOCK);
    let parts = threads().min(blocks).max(1);
    // Each part takes consecutive whole blocks.
    let cols = blocks.div_ceil(parts) * COL_BLOCK;
    let mut groups = Vec::with_capacity(parts);
    let mut rest = dst;
    let mut c0 = 0;
    while c0 < n {
        let take = cols.min(n - c0);
        let (left, right) = rest.split_at_col_mut(take);
        groups.push((c0, Mutex::new(left)));
        rest = right;
        c0 += take;
    }
    for_each_part(groups.len(), |p| {
        let (g0, group) = &groups[p];
        let mut group = group.lock().unwrap_or_else(|e| e.into_inner());
        let width = group.ncols();
        for b0 in (0..width).step_by(COL_BLOCK) {
            let w = COL_BLOCK.min(width - b0);
            let block = group.as_mut().subcols_mut(b0, w);
            matmul(block, accum, lhs, rhs.subcols(g0 + b0, w), alpha, Par::Seq);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::Mat;

    #[test]
    fn split_gemm_equals_a_single_gemm_for_awkward_shapes() {
        for (m, k, n) in [(1, 3, 2), (31, 5, 7), (97, 13, 11), (250, 40, 33)] {
            let a = Mat::<f32>::from_fn(m, k, |i, j| ((i * 7 + j * 3) % 11) as f32 - 5.0);
            let b = Mat::<f32>::from_fn(k, n, |i, j| ((i * 5 + j * 2) % 13) as f32 - 6.0);
            let mut want = Mat::<f32>::from_fn(m, n, |i, j| (i + j) as f32);
            let mut got = want.clone();
            matmul(
                want.as_mut(),
                Accum::Add,
                a.as_ref(),
                b.as_ref(),
                0.5,
                Par::Seq,
            );
            gemm(got.as_mut(), Accum::Add, a.as_ref(), b.as_ref(), 0.5);
            assert_eq!(got, want, "{m}x{k}x{n}");
        }
    }

    #[test]
    fn row_blocks_cover_every_row_once_on_any_thread_count() {
        // 48 threads and the LSTM's 1,220 rows once asked for a 38th block past the end.
        assert_eq!(row_blocks(1220, 48), (37, 33));
        // 33 threads and 1,057 rows once left a last block of one row: it joins the one before.
        assert_eq!(row_blocks(1057, 33), (32, 33));
        for threads in 1..=256 {
            for m in (0..5000).step_by(3) {
                let (parts, rows) = row_blocks(m, threads);
                let last = m.saturating_sub((parts - 1) * rows);
                assert!(
                    parts >= 1 && (parts - 1) * rows < m.max(1),
                    "{m} rows, {threads}"
                );
                assert!(
                    last <= rows + 1,
                    "{m} rows on {threads} threads: last {last}"
                );
                assert!(
                    parts == 1 || last >= 2,
                    "{m} rows on {threads}: a one-row block"
                );
            }
        }
    }

    #[test]
    fn chunks_cover_the_data_once_in_order() {
        let mut v = vec![0usize; 1003];
        for_each_chunk_mut(&mut v, 100, |p, c| {
            for (k, x) in c.iter_mut().enumerate() {
                *x += p * 100 + k + 1;
            }
        });
        assert!(v.iter().enumerate().all(|(i, &x)| x == i + 1));
    }

    #[test]
    fn column_blocked_gemm_equals_its_blocks_run_one_by_one() {
        for (m, k, n) in [(1, 3, 2), (16, 40, 128), (5, 13, 300), (16, 64, 1000)] {
            let a = Mat::<f32>::from_fn(m, k, |i, j| ((i * 7 + j * 3) % 11) as f32 - 5.0);
            let b = Mat::<f32>::from_fn(k, n, |i, j| ((i * 5 + j * 2) % 13) as f32 * 0.3 - 1.7);
            let mut want = Mat::<f32>::from_fn(m, n, |i, j| (i + j) as f32);
            let mut got = want.clone();
            for c0 in (0..n).step_by(COL_BLOCK) {
                let w = COL_BLOCK.min(n - c0);
                matmul(
                    want.as_mut().subcols_mut(c0, w),
                    Accum::Add,
                    a.as_ref(),
                    b.as_ref().subcols(c0, w),
                    0.5,
                    Par::Seq,
                );
            }
            gemm_cols(got.as_mut(), Accum::Add, a.as_ref(), b.as_ref(), 0.5);
            assert_eq!(got, want, "{m}x{k}x{n}");
        }
    }
}
