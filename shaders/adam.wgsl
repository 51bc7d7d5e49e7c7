// One bias-corrected Adam step over up to eight tensors in one launch (src/kernels/optim.rs's
// `Adam`): a step's tensors, each with its own param, moments and gradient buffers (the layout
// checkpoints keep), updated in place. Follows flat_common.wgsl.
//
// A template: build.rs writes it out once per slot count T (1..=8) as `adam_T.wgsl`, the lines
// from `@each slot` to `@end` once per slot j, with `{j}` replaced by j and `{b0}`..`{b3}` by
// the slot's bindings 4j+1..4j+4. Tensor j holds elements ends[j-1]..ends[j] of the launch
// (from 0 for j = 0). Each element's step is the same expression for every tensor, so one launch
// gives the bits of one launch per tensor.

struct Params {
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    scale: f32, // the gradient is read as grad * scale (1, or 1/G over G routing groups)
    bias1: f32, // 1 / (1 - beta1^step), written at run time
    bias2: f32, // 1 / (1 - beta2^step)
    total: u32, // elements of every slot together
    ends: array<vec4<u32>, 2>, // slot j's end, ends[j / 4][j % 4]; past the last slot: total
}

@group(0) @binding(0) var<uniform> p: Params;

// @each slot
@group(0) @binding({b0}) var<storage, read_write> param_{j}: array<f32>;
@group(0) @binding({b1}) var<storage, read_write> m1_{j}: array<f32>;
@group(0) @binding({b2}) var<storage, read_write> m2_{j}: array<f32>;
@group(0) @binding({b3}) var<storage, read> grad_{j}: array<f32>;

// Element i of slot {j}'s tensor: m1, m2 the first and second moments.
fn step_{j}(i: u32) {
    let g = grad_{j}[i] * p.scale;
    let m = p.beta1 * m1_{j}[i] + (1.0 - p.beta1) * g;
    let v = p.beta2 * m2_{j}[i] + (1.0 - p.beta2) * g * g;
    m1_{j}[i] = m;
    m2_{j}[i] = v;
    param_{j}[i] = param_{j}[i] - p.lr * (m * p.bias1) / (sqrt(v * p.bias2) + p.eps);
}
// @end

fn end_of(j: u32) -> u32 {
    return p.ends[j / 4u][j % 4u];
}

@compute @workgroup_size(256)
fn adam(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = index(gid, groups);
    if (i >= p.total) { return; }
    var start = 0u;
    // @each slot
    if (i < end_of({j}u)) { step_{j}(i - start); return; }
    start = end_of({j}u);
    // @end
}
