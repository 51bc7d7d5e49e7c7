// C = A · Bᵀ with the register blocking of matmul_vec4.wgsl, no workgroup memory: A [M, K], B
// [N, K] (or [G, N, K] per row group, as in matmul_naive.wgsl): the input gradient of a linear
// layer. Each invocation computes 4 rows × 4 columns as dot products of vec4s along K. Needs
// K % 4 == 0; any M and N (edge rows and columns are read clamped and never written).
// Every output sums over k in ascending order, whatever M is or however the rows are split into
// groups: N devices holding a split of the rows compute the same bits as one device.

@group(0) @binding(1) var<storage, read> a: array<vec4<Elem>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<Elem>>;

@compute @workgroup_size(16, 4, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let g = gid.z;
    let k4 = p.k / 4u;
    let col = gid.x * 4u;
    let row0 = offsets[g];
    let rows = min(offsets[g + 1u] - row0, p.max_group_rows);
    let r = gid.y * 4u;
    if (col >= p.n || r >= rows) {
        return;
    }
    // Rows past the group's end and columns past N read the last valid one: always in bounds,
    // never written.
    let last = rows - 1u;
    let a0 = (row0 + min(r, last)) * k4;
    let a1 = (row0 + min(r + 1u, last)) * k4;
    let a2 = (row0 + min(r + 2u, last)) * k4;
    let a3 = (row0 + min(r + 3u, last)) * k4;
    let nb = g * p.n;
    let b0 = (nb + col) * k4;
    let b1 = (nb + min(col + 1u, p.n - 1u)) * k4;
    let b2 = (nb + min(col + 2u, p.n - 1u)) * k4;
    let b3 = (nb + min(col + 3u, p.n - 1u)) * k4;

    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    for (var kq = 0u; kq < k4; kq++) {
        let y0 = vec4<f32>(b[b0 + kq]);
        let y1 = vec4<f32>(b[b1 + kq]);
        let y2 = vec4<f32>(b[b2 + kq]);
        let y3 = vec4<f32>(b[b3 + kq]);
        let x0 = vec4<f32>(a[a0 + kq]);
        let x1 = vec4<f32>(a[a1 + kq]);
        let x2 = vec4<f32>(a[a2 + kq]);
        let x3 = vec4<f32>(a[a3 + kq]);
        c0 += vec4<f32>(dot(x0, y0), dot(x0, y1), dot(x0, y2), dot(x0, y3));
        c1 += vec4<f32>(dot(x1, y0), dot(x1, y1), dot(x1, y2), dot(x1, y3));
        c2 += vec4<f32>(dot(x2, y0), dot(x2, y1), dot(x2, y2), dot(x2, y3));
        c3 += vec4<f32>(dot(x3, y0), dot(x3, y1), dot(x3, y2), dot(x3, y3));
    }
    store(row0 + r, col, c0);
    if (r + 1u < rows) { store(row0 + r + 1u, col, c1); }
    if (r + 2u < rows) { store(row0 + r + 2u, col, c2); }
    if (r + 3u < rows) { store(row0 + r + 3u, col, c3); }
}
