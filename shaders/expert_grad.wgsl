// Per-expert weight gradients over the grouped matmul's row groups (src/kernels/expert_grad.rs).
// Follows flat_common.wgsl.

@group(0) @binding(20) var<storage, read> wa: array<f32>;
@group(0) @binding(21) var<storage, read> wb: array<f32>;
@group(0) @binding(22) var<storage, read_write> wc: array<f32>;
@group(0) @binding(27) var<storage, read> offsets: array<u32>;

// wc[g] = wa[g]^T * wb[g], where wa[g] and wb[g] are rows offsets[g] .. offsets[g+1] of wa
// [rows, inner] and wb [rows, cols]: the weight gradient of each expert from its own rows (the
// grouped matmul's row groups). Rows past `rows` are never read, whatever the offsets say.
@compute @workgroup_size(256)
fn expert_weight_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    let per = p.inner * p.cols;
    if (i >= p.experts * per) { return; }
    let g = i / per;
    let a = (i % per) / p.cols;
    let b = i % p.cols;
    // Rows are summed in blocks of `capacity` (0: the whole group as one block), each block's
    // partial sum then added in order: a group made of D devices' slot blocks sums exactly as
    // one device summing each block in its own step and accumulating the steps.
    let start = offsets[g];
    let end = min(offsets[g + 1u], p.rows);
    let block = max(select(end - start, p.capacity, p.capacity > 0u), 1u);
    var acc = 0.0;
    for (var b0 = start; b0 < end; b0 += block) {
        var part = 0.0;
        let stop = min(b0 + block, end);
        for (var r = b0; r < stop; r++) {
            part += wa[r * p.inner + a] * wb[r * p.cols + b];
        }
        acc += part;
    }
    wc[i] = acc;
}
