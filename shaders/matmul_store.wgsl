// The output of the matmul shaders whose C rows need not be vec4-aligned (prepended after
// matmul_common.wgsl): C as scalars, and a store of 4 consecutive columns that stops at N.

@group(0) @binding(3) var<storage, read_write> c: array<Elem>;

fn store(row: u32, col: u32, v: vec4<f32>) {
    let at = row * p.n + col;
    c[at] = epi(at, Elem(v.x));
    if (col + 1u < p.n) { c[at + 1u] = epi(at + 1u, Elem(v.y)); }
    if (col + 2u < p.n) { c[at + 2u] = epi(at + 2u, Elem(v.z)); }
    if (col + 3u < p.n) { c[at + 3u] = epi(at + 3u, Elem(v.w)); }
}
