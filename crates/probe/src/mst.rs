//! The minimum spanning tree of a predicted distance matrix (Prim's algorithm, O(n²)), the
//! parse that UUAS scores.

/// The minimum spanning tree over the words `nodes` of a row-major n × n distance matrix, as
/// undirected edges (min, max) sorted. Ties go to the lower node index, so the tree is
/// deterministic; fewer than two nodes give no edge. Non-finite distances count as +∞.
// Prim's algorithm indexes several arrays by node: index loops read clearer here.
#[allow(clippy::needless_range_loop)]
pub fn minimum_spanning_tree(dist: &[f64], n: usize, nodes: &[usize]) -> Vec<(usize, usize)> {
    let m = nodes.len();
    if m < 2 {
        return Vec::new();
    }
    let d = |a: usize, b: usize| {
        let x = dist[nodes[a] * n + nodes[b]];
        if x.is_finite() {
            x
        } else {
            f64::INFINITY
        }
    };
    let mut in_tree = vec![false; m];
    let mut best = vec![f64::INFINITY; m];
    let mut parent = vec![0usize; m];
    in_tree[0] = true;
    for v in 1..m {
        best[v] = d(0, v);
    }
    let mut edges = Vec::with_capacity(m - 1);
    for _ in 1..m {
        // The nearest node outside the tree (first index on ties; an unreachable one last).
        let mut u = usize::MAX;
        for v in 0..m {
            if !in_tree[v] && (u == usize::MAX || best[v] < best[u]) {
                u = v;
            }
        }
        in_tree[u] = true;
        let (a, b) = (nodes[parent[u]], nodes[u]);
        edges.push((a.min(b), a.max(b)));
        for v in 0..m {
            if !in_tree[v] && d(u, v) < best[v] {
                best[v] = d(u, v);
                parent[v] = u;
            }
        }
    }
    edges.sort_unstable();
    edges
}
