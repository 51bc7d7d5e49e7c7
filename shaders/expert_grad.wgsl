// Per-expert weight gradients over the grouped matmul's row groups (src/kernels/expert_grad.rs).
// Follows flat_common.wgsl.

struct Params {
    rows: u32,         // rows of A and B (of both products)
    inner: u32,        // K of the per-group A^T B (columns of A)
    cols: u32,         // N, columns of B
    groups: u32,       // G
    block: u32,        // rows per summed block (0: a group at once)
    limit_stride: u32, // words between live-row counts (0: no counts)
    inner2: u32,       // the second product's inner and cols (PAIRED)
    cols2: u32,
}

// 1: the launch computes a second product over the same row groups, wc2 = wa2^T * wb2, in the
// grid's second z layer (an expert layer's two weight gradients in one launch). Specialised per
// pipeline, so that a single product carries no branch for it.
const PAIRED: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(20) var<storage, read> wa: array<f32>;
@group(0) @binding(21) var<storage, read> wb: array<f32>;
@group(0) @binding(22) var<storage, read_write> wc: array<f32>;
@group(0) @binding(27) var<storage, read> offsets: array<u32>;
// Live rows per block (with p.limit_stride, their stride, above 0): block j (rows j * p.block ..) has
// limits[j * p.limit_stride] rows that may be nonzero; the rest are zero rows and are skipped, which adds
// nothing and so changes no bit. Bound to the offsets when there are none (never read then).
@group(0) @binding(28) var<storage, read> limits: array<u32>;
// PAIRED: the second product's operands and output.
@group(0) @binding(23) var<storage, read> wa2: array<f32>;
@group(0) @binding(24) var<storage, read> wb2: array<f32>;
@group(0) @binding(25) var<storage, read_write> wc2: array<f32>;

// wc[g] = wa[g]^T * wb[g], where wa[g] and wb[g] are rows offsets[g] .. offsets[g+1] of wa
// [rows, inner] and wb [rows, cols]: the weight gradient of each expert from its own rows (the
// grouped matmul's row groups). Rows past `rows` are never read, whatever the offsets say.
// Each invocation computes 8 x 8 outputs (8 of wa's columns by 8 of wb's) as outer products, 16
// loads per 64 multiply-adds where one output per invocation needs 2 per 1 (4 x 4 measured half
// as fast again as 1 x 1); neighbouring invocations take neighbouring columns of wb. Edge
// indices are read clamped and never written.
// With PAIRED, the grid's z layer 1 computes the second product, each invocation as above with
// the second product's operands and sizes: each output's sum is the single product's, bit for bit.
@compute @workgroup_size(256)
fn expert_weight_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    // Uniform over the workgroup: which product it computes.
    let second = PAIRED != 0u && gid.z == 1u;
    let inner = select(p.inner, p.inner2, second);
    let cols = select(p.cols, p.cols2, second);
    let tiles_a = (inner + 7u) / 8u;
    let tiles_b = (cols + 7u) / 8u;
    let per = tiles_a * tiles_b;
    if (i >= p.groups * per) { return; }
    let g = i / per;
    let a0 = ((i % per) / tiles_b) * 8u;
    let b0 = (i % tiles_b) * 8u;
    let la = inner - 1u;
    let lb = cols - 1u;
    let ia = vec4<u32>(a0, min(a0 + 1u, la), min(a0 + 2u, la), min(a0 + 3u, la));
    let ja = vec4<u32>(min(a0 + 4u, la), min(a0 + 5u, la), min(a0 + 6u, la), min(a0 + 7u, la));
    let ib = vec4<u32>(b0, min(b0 + 1u, lb), min(b0 + 2u, lb), min(b0 + 3u, lb));
    let jb = vec4<u32>(min(b0 + 4u, lb), min(b0 + 5u, lb), min(b0 + 6u, lb), min(b0 + 7u, lb));
    // Rows are summed in blocks of `block` rows (0: the whole group as one block), each block's
    // partial sum then added in order: a group made of D devices' slot blocks sums exactly as
    // one device summing each block in its own step and accumulating the steps.
    let start = offsets[g];
    let end = min(offsets[g + 1u], p.rows);
    let block = max(select(end - start, p.block, p.block > 0u), 1u);
    // acc[j] and acc[j + 8]: output row a0 + j, columns b0..b0+3 and b0+4..b0+7.
    var acc = array<vec4<f32>, 16>();
    for (var r0 = start; r0 < end; r0 += block) {
        var part = array<vec4<f32>, 16>();
        var stop = min(r0 + block, end);
        if (p.limit_stride != 0u) {
            stop = min(stop, r0 + limits[(r0 / block) * p.limit_stride]);
        }
        // The product is uniform over a workgroup: one loop or the other, each loading its own
        // operands once (a branch inside the loop made a CPU driver load both).
        if (second) {
            for (var r = r0; r < stop; r++) {
                let ra = r * inner;
                let rb = r * cols;
                let x = vec4<f32>(wa2[ra + ia.x], wa2[ra + ia.y], wa2[ra + ia.z], wa2[ra + ia.w]);
                let z = vec4<f32>(wa2[ra + ja.x], wa2[ra + ja.y], wa2[ra + ja.z], wa2[ra + ja.w]);
                let lo = vec4<f32>(wb2[rb + ib.x], wb2[rb + ib.y], wb2[rb + ib.z], wb2[rb + ib.w]);
                let hi = vec4<f32>(wb2[rb + jb.x], wb2[rb + jb.y], wb2[rb + jb.z], wb2[rb + jb.w]);
                add_outer(&part, x, z, lo, hi);
            }
        } else {
            for (var r = r0; r < stop; r++) {
                let ra = r * inner;
                let rb = r * cols;
                let x = vec4<f32>(wa[ra + ia.x], wa[ra + ia.y], wa[ra + ia.z], wa[ra + ia.w]);
                let z = vec4<f32>(wa[ra + ja.x], wa[ra + ja.y], wa[ra + ja.z], wa[ra + ja.w]);
                let lo = vec4<f32>(wb[rb + ib.x], wb[rb + ib.y], wb[rb + ib.z], wb[rb + ib.w]);
                let hi = vec4<f32>(wb[rb + jb.x], wb[rb + jb.y], wb[rb + jb.z], wb[rb + jb.w]);
                add_outer(&part, x, z, lo, hi);
            }
        }
        for (var j = 0u; j < 16u; j++) {
            acc[j] += part[j];
        }
    }
    let out = g * inner * cols;
    for (var j = 0u; j < 8u; j++) {
        let row = a0 + j;
        if (row < inner) {
            store4(second, cols, out + row * cols, b0, acc[j]);
            store4(second, cols, out + row * cols, b0 + 4u, acc[j + 8u]);
        }
    }
}

// One row's outer products: part[j] += row a0 + j of A times B's columns b0..b0+3 (x, z: A's 8
// values; lo, hi: B's two vec4s), part[j + 8] the same with b0+4..b0+7.
fn add_outer(part: ptr<function, array<vec4<f32>, 16>>, x: vec4<f32>, z: vec4<f32>, lo: vec4<f32>, hi: vec4<f32>) {
    (*part)[0] += x.x * lo;
    (*part)[1] += x.y * lo;
    (*part)[2] += x.z * lo;
    (*part)[3] += x.w * lo;
    (*part)[4] += z.x * lo;
    (*part)[5] += z.y * lo;
    (*part)[6] += z.z * lo;
    (*part)[7] += z.w * lo;
    (*part)[8] += x.x * hi;
    (*part)[9] += x.y * hi;
    (*part)[10] += x.z * hi;
    (*part)[11] += x.w * hi;
    (*part)[12] += z.x * hi;
    (*part)[13] += z.y * hi;
    (*part)[14] += z.z * hi;
    (*part)[15] += z.w * hi;
}

// Columns col..col+3 of the output row at `base` (of wc2 when `second`), those before `cols`.
fn store4(second: bool, cols: u32, base: u32, col: u32, v: vec4<f32>) {
    for (var c = 0u; c < 4u; c++) {
        if (col + c >= cols) { return; }
        if (second) { wc2[base + col + c] = v[c]; } else { wc[base + col + c] = v[c]; }
    }
}
