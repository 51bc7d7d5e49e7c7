// What the flat f32 kernels share (embedding, loss, optim, the backward of dispatch/combine and of
// the router, the expert weight gradient): the routing's records, and a 2-D grid of 256-thread
// workgroups (so that long arrays fit under the per-dimension workgroup limit)
// folded back into one index (`embed_grad` alone runs 64-thread workgroups, one per block of ids,
// over the same grid of workgroups). Put before each of those shaders' sources (WGSL has no
// includes).
//
// Each shader declares its own parameters, a uniform `p` at binding 0 (each field's meaning is
// written there and matches the Rust struct of its module). Each entry point's auto layout holds
// exactly the bindings it names. The bindings declared here mean the same in every shader; beyond
// them a number may mean different things in different shaders (28: the loss's values, the expert
// gradient's limits), each compiled alone. No float atomics: every output element has one writer.

struct Route {
    expert: u32,
    position: u32,
    gate: f32,
    kept: u32,
}

struct ExpertStat {
    kept: u32,
    demand: u32,
    fraction: f32,
    mean_prob: f32,
}

const WG: u32 = 256u;

fn index(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return gid.x + gid.y * groups.x * WG;
}

// Rows of `cols` logits: what the loss and the router's backward read.
@group(0) @binding(6) var<storage, read> logits: array<f32>;

fn row_max(row: u32, cols: u32) -> f32 {
    var m = logits[row * cols];
    for (var j = 1u; j < cols; j++) { m = max(m, logits[row * cols + j]); }
    return m;
}
