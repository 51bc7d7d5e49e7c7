// The first pass of the `transpose` matmul variant (prepended after matmul_common.wgsl): A, stored
// [K, M] for Aᵀ·B or Aᵀ·Bᵀ, copied out as Aᵀ, [M, K] row-major, so that the second pass reads it
// along rows with the A·B (or A·Bᵀ) kernel. The direct Aᵀ kernels read A down its columns, a row
// of A (a page, at M = 1024) per k: with B's rows as well that is twice the pages per block that
// A·B touches, which a CPU driver's TLB does not hold. One copy costs a streaming pass over A.
// Each invocation moves 4 consecutive k of one column; neighbouring invocations (SIMD lanes on a
// CPU driver) read neighbouring columns of one row of A.

@group(0) @binding(1) var<storage, read> a: array<Elem>;
@group(0) @binding(2) var<storage, read_write> t: array<Elem>;

@compute @workgroup_size(8, 8, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let k0 = gid.y * 4u;
    if (i >= p.m || k0 >= p.k) {
        return;
    }
    let k_end = min(k0 + 4u, p.k);
    for (var k = k0; k < k_end; k++) {
        t[i * p.k + k] = a[k * p.m + i];
    }
}
