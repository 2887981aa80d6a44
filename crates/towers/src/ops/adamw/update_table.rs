//! The table the one-pass update (`adamw_multi.cu`) reads its parameters from, and the check
//! that its written buffers never overlap: plain host arithmetic, tested without a GPU.

/// Words per parameter in the table of `adamw_multi.cu` (its `ADAMW_TABLE_WORDS`).
pub(crate) const TABLE_WORDS: usize = 7;

/// The table of `adamw_multi.cu` for parameters given as (the device addresses of θ, g, m and
/// v, elements, keep): per parameter the four addresses, its element count, its first chunk of
/// `chunk` elements (the chunks of the parameters before it) and keep's f32 bits; and the
/// number of chunks over all.
pub(crate) fn multi_table(rows: &[([u64; 4], usize, f32)], chunk: usize) -> (Vec<u64>, u64) {
    let mut words = Vec::with_capacity(rows.len() * TABLE_WORDS);
    let mut first = 0u64;
    for (addrs, n, keep) in rows {
        words.extend_from_slice(addrs);
        words.extend([*n as u64, first, u64::from(keep.to_bits())]);
        first += n.div_ceil(chunk) as u64;
    }
    (words, first)
}

/// Whether no buffer that is written overlaps another buffer, of byte ranges (start, end,
/// written): the kernels then never write one element from two threads nor read what
/// another thread writes. Reads may overlap reads.
pub(crate) fn writes_disjoint(ranges: &mut [(u64, u64, bool)]) -> bool {
    ranges.sort_unstable_by_key(|r| r.0);
    // The furthest end reached so far by any range, and by a written one.
    let (mut any_end, mut written_end) = (0u64, 0u64);
    for &(start, end, written) in ranges.iter() {
        if start < written_end || (written && start < any_end) {
            return false;
        }
        any_end = any_end.max(end);
        if written {
            written_end = written_end.max(end);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_multi_tensor_table_numbers_each_parameters_chunks_after_the_ones_before() {
        let rows = [
            ([10, 11, 12, 13], 5000, 0.5f32),
            ([20, 21, 22, 23], 1, 1.0),
            ([30, 31, 32, 33], 2048, 0.25),
        ];
        let (words, chunks) = multi_table(&rows, 2048);
        // 5000 elements: 3 chunks (the last short); 1: 1; 2048: exactly 1.
        assert_eq!(chunks, 5);
        assert_eq!(words.len(), 3 * TABLE_WORDS);
        assert_eq!(
            &words[..TABLE_WORDS],
            &[10, 11, 12, 13, 5000, 0, 0.5f32.to_bits() as u64]
        );
        assert_eq!(
            &words[TABLE_WORDS..2 * TABLE_WORDS - 1],
            &[20, 21, 22, 23, 1, 3]
        );
        assert_eq!(words[2 * TABLE_WORDS + 5], 4);
        assert_eq!(f32::from_bits(words[3 * TABLE_WORDS - 1] as u32), 0.25);
        // The kernel reads rows of the same width.
        let width = format!("#define ADAMW_TABLE_WORDS {TABLE_WORDS}\n");
        assert!(include_str!("adamw_multi.cu").contains(&width), "{width}");
    }

    #[test]
    fn writes_disjoint_allows_shared_reads_and_rejects_any_overlap_with_a_write() {
        let ok = |r: &[(u64, u64, bool)]| writes_disjoint(&mut r.to_vec());
        // Adjacent buffers, and two reads of one gradient.
        assert!(ok(&[
            (0, 8, true),
            (8, 16, true),
            (16, 24, false),
            (16, 24, false)
        ]));
        // A write over a read, a read inside a write, two writes of one buffer, a write that
        // starts inside a read that reaches past it: all rejected, in any order.
        assert!(!ok(&[(16, 24, false), (20, 28, true)]));
        assert!(!ok(&[(0, 100, true), (40, 48, false)]));
        assert!(!ok(&[(8, 16, true), (0, 4, false), (8, 16, true)]));
        assert!(!ok(&[(0, 100, false), (200, 300, true), (50, 60, true)]));
        assert!(ok(&[]));
    }
}
