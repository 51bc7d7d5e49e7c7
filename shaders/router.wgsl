// Switch/GShard router in two passes.
//   topk:      per token, softmax over expert logits and the top-k experts (k = 1 or 2) with gates,
//              and the logits' logsumexp; topk_linear computes the token's logits first (x · w),
//              in the launch that routes them.
//   positions: per expert, each routed token's slot in that expert in token order, all first
//              choices before any second choice (Switch priority); the slot decides whether the token
//              fits the capacity; and the load-balancing statistics f_i and P_i.
// Top-k is taken on the logits (softmax is monotonic), lowest index first on ties, so the choice is
// exact and reproducible on every device.

struct Params {
    tokens: u32,
    experts: u32,
    k: u32,
    capacity: u32,
    normalize: u32,
    model: u32, // topk_linear: the width of x's rows
    _pad1: u32,
    _pad2: u32,
}

struct Route {
    expert: u32,
    position: u32,
    gate: f32,
    kept: u32,
}

struct ExpertStat {
    kept: u32,      // tokens this expert processes (min(demand, capacity))
    demand: u32,    // tokens that chose this expert, first or second choice
    fraction: f32,  // f_i: fraction of tokens whose first choice is this expert
    mean_prob: f32, // P_i: mean router probability of this expert
}

@group(0) @binding(0) var<uniform> p: Params;
// topk reads the logits; topk_linear writes them (the backward reads them), then reads them back.
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> probs: array<f32>;
@group(0) @binding(3) var<storage, read_write> routes: array<Route>;
@group(0) @binding(4) var<storage, read_write> stats: array<ExpertStat>;
// Each token's logsumexp of its logits (the z-loss statistic): row_logsumexp's sum, in its order.
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;

// topk_linear: the tokens' rows x [tokens, model] and the router's weights w [model, experts].
@group(0) @binding(6) var<storage, read> x: array<f32>;
@group(0) @binding(7) var<storage, read> w: array<f32>;

@compute @workgroup_size(64, 1, 1)
fn topk(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < p.tokens) {
        route(gid.x);
    }
}

// logits[t] = x[t] · w, then topk. Each logit is summed as matmul_vec4.wgsl sums an output of
// x · w: four products of consecutive k added left to right, that added to the sum, k ascending
// (a tail of fewer than four at the end where `model` is not a multiple of 4).
@compute @workgroup_size(64, 1, 1)
fn topk_linear(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    if (t >= p.tokens) {
        return;
    }
    let xr = t * p.model;
    let whole = p.model / 4u * 4u;
    for (var e = 0u; e < p.experts; e++) {
        var acc = 0.0;
        for (var k = 0u; k < whole; k += 4u) {
            acc += x[xr + k] * w[k * p.experts + e] + x[xr + k + 1u] * w[(k + 1u) * p.experts + e]
                + x[xr + k + 2u] * w[(k + 2u) * p.experts + e]
                + x[xr + k + 3u] * w[(k + 3u) * p.experts + e];
        }
        for (var k = whole; k < p.model; k++) {
            acc += x[xr + k] * w[k * p.experts + e];
        }
        logits[t * p.experts + e] = acc;
    }
    route(t);
}

// Token t's softmax, top-k choices with their gates, and logsumexp, from its logits.
fn route(t: u32) {
    let row = t * p.experts;
    var best = 0u;
    var best_logit = logits[row];
    for (var e = 1u; e < p.experts; e++) {
        let l = logits[row + e];
        if (l > best_logit) { best_logit = l; best = e; }
    }
    var sum = 0.0;
    for (var e = 0u; e < p.experts; e++) {
        sum += exp(logits[row + e] - best_logit);
    }
    for (var e = 0u; e < p.experts; e++) {
        probs[row + e] = exp(logits[row + e] - best_logit) / sum;
    }
    lse[t] = best_logit + log(sum);
    let g1 = probs[row + best];
    if (p.k == 1u) {
        routes[t] = Route(best, 0u, g1, 0u);
        return;
    }
    var second = select(0u, 1u, best == 0u);
    var second_logit = logits[row + second];
    for (var e = 0u; e < p.experts; e++) {
        let l = logits[row + e];
        if (e != best && l > second_logit) { second_logit = l; second = e; }
    }
    let g2 = probs[row + second];
    var scale = 1.0;
    if (p.normalize != 0u) { scale = 1.0 / (g1 + g2); }
    routes[t * 2u] = Route(best, 0u, g1 * scale, 0u);
    routes[t * 2u + 1u] = Route(second, 0u, g2 * scale, 0u);
}

// Each invocation of an expert's workgroup owns a contiguous chunk of the tokens. It counts its
// chunk's choices of the expert, reads how many the chunks before it hold, and numbers its own in
// token order: the same slots as one serial pass, with one barrier per choice rank (and one for
// P_i) where a Hillis-Steele scan of 256 flags took eighteen per rank. Barriers are what a CPU
// driver (llvmpipe) pays for, once per invocation batch, so the scan's were most of a small
// batch's routing time.
const WG: u32 = 64u;
var<workgroup> counts: array<u32, 128>; // [choice rank (k <= 2)][invocation]
var<workgroup> psum: array<f32, 64>;

@compute @workgroup_size(64, 1, 1)
fn positions(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = wid.x;
    let i = lid.x;
    let chunk = (p.tokens + WG - 1u) / WG;
    let lo = min(i * chunk, p.tokens);
    let hi = min(lo + chunk, p.tokens);
    var base = 0u;
    var first_choices = 0u;
    for (var c = 0u; c < p.k; c++) {
        var mine = 0u;
        for (var t = lo; t < hi; t++) {
            if (routes[t * p.k + c].expert == e) { mine++; }
        }
        // Each rank has its own row of counts, so the next rank's writes need no barrier first.
        counts[c * WG + i] = mine;
        workgroupBarrier();
        var before = 0u;
        var total = 0u;
        for (var j = 0u; j < WG; j++) {
            let n = counts[c * WG + j];
            if (j < i) { before += n; }
            total += n;
        }
        var pos = base + before;
        for (var t = lo; t < hi; t++) {
            let r = t * p.k + c;
            if (routes[r].expert == e) {
                routes[r].position = pos;
                routes[r].kept = select(0u, 1u, pos < p.capacity);
                pos++;
            }
        }
        base += total;
        if (c == 0u) { first_choices = base; }
    }
    // P_i: each invocation sums its chunk in token order, then the first sums the chunks in order.
    var s = 0.0;
    for (var t = lo; t < hi; t++) {
        s += probs[t * p.experts + e];
    }
    psum[i] = s;
    workgroupBarrier();
    if (i == 0u) {
        var sum = 0.0;
        for (var j = 0u; j < WG; j++) { sum += psum[j]; }
        let n = f32(max(p.tokens, 1u));
        stats[e] = ExpertStat(min(base, p.capacity), base, f32(first_choices) / n, sum / n);
    }
}
