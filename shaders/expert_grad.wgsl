// Per-expert weight gradients over the grouped matmul's row groups (src/kernels/expert_grad.rs).
// Follows flat_common.wgsl.

@group(0) @binding(20) var<storage, read> wa: array<f32>;
@group(0) @binding(21) var<storage, read> wb: array<f32>;
@group(0) @binding(22) var<storage, read_write> wc: array<f32>;
@group(0) @binding(27) var<storage, read> offsets: array<u32>;

// wc[g] = wa[g]^T * wb[g], where wa[g] and wb[g] are rows offsets[g] .. offsets[g+1] of wa
// [rows, inner] and wb [rows, cols]: the weight gradient of each expert from its own rows (the
// grouped matmul's row groups). Rows past `rows` are never read, whatever the offsets say.
// Each invocation computes 4 x 4 outputs (4 of wa's columns by 4 of wb's) as outer products, 8
// loads per 16 multiply-adds where one output per invocation needs 2 per 1; neighbouring
// invocations take neighbouring columns of wb. Edge indices are read clamped and never written.
@compute @workgroup_size(256)
fn expert_weight_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    let tiles_a = (p.inner + 3u) / 4u;
    let tiles_b = (p.cols + 3u) / 4u;
    let per = tiles_a * tiles_b;
    if (i >= p.experts * per) { return; }
    let g = i / per;
    let a0 = ((i % per) / tiles_b) * 4u;
    let b0 = (i % tiles_b) * 4u;
    let ia = vec4<u32>(
        a0, min(a0 + 1u, p.inner - 1u), min(a0 + 2u, p.inner - 1u), min(a0 + 3u, p.inner - 1u)
    );
    let ib = vec4<u32>(
        b0, min(b0 + 1u, p.cols - 1u), min(b0 + 2u, p.cols - 1u), min(b0 + 3u, p.cols - 1u)
    );
    // Rows are summed in blocks of `capacity` (0: the whole group as one block), each block's
    // partial sum then added in order: a group made of D devices' slot blocks sums exactly as
    // one device summing each block in its own step and accumulating the steps.
    let start = offsets[g];
    let end = min(offsets[g + 1u], p.rows);
    let block = max(select(end - start, p.capacity, p.capacity > 0u), 1u);
    var acc = array<vec4<f32>, 4>();
    for (var r0 = start; r0 < end; r0 += block) {
        var part = array<vec4<f32>, 4>();
        let stop = min(r0 + block, end);
        for (var r = r0; r < stop; r++) {
            let x = vec4<f32>(
                wa[r * p.inner + ia.x], wa[r * p.inner + ia.y],
                wa[r * p.inner + ia.z], wa[r * p.inner + ia.w]
            );
            let y = vec4<f32>(
                wb[r * p.cols + ib.x], wb[r * p.cols + ib.y],
                wb[r * p.cols + ib.z], wb[r * p.cols + ib.w]
            );
            part[0] += x.x * y;
            part[1] += x.y * y;
            part[2] += x.z * y;
            part[3] += x.w * y;
        }
        acc[0] += part[0];
        acc[1] += part[1];
        acc[2] += part[2];
        acc[3] += part[3];
    }
    let out = g * p.inner * p.cols;
    for (var j = 0u; j < 4u; j++) {
        let row = a0 + j;
        if (row < p.inner) {
            let at = out + row * p.cols + b0;
            wc[at] = acc[j].x;
            if (b0 + 1u < p.cols) { wc[at + 1u] = acc[j].y; }
            if (b0 + 2u < p.cols) { wc[at + 2u] = acc[j].z; }
            if (b0 + 3u < p.cols) { wc[at + 3u] = acc[j].w; }
        }
    }
}
