// Shared by every matmul shader (prepended by the launcher): the call's shape and the group row
// offsets. Layouts: A is [M, K] ([K, M] with trans_a); B is [K, N] or [G, K, N] ([N, K] / [G, N, K]
// with trans_b); C is [M, N]. Rows offsets[g]..offsets[g+1] of C use B[g / blocks] (`blocks`
// consecutive row groups share one weight matrix: an expert's slot blocks from each source), at
// most max_group_rows of them (the static bound that sizes the grid).
//
// Live rows: with limit_stride > 0, group g's rows from limits[g * limit_stride] on are promised
// to be zero rows of op(A) (empty expert slots), so a tile that starts at or past that count
// writes zeros without reading anything: the output is the unlimited product's, bit for bit
// (a sum of exact zeros from +0.0 is +0.0), at the cost of the live rows only.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    groups: u32,
    trans_a: u32,
    trans_b: u32,
    max_group_rows: u32,
    blocks: u32,
    limit_stride: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

// The epilogue's bits: its stages, numbered in the order they run (1: relu, 2: add, 4: a relu's
// backward, 8: GELU's backward, 32: GELU), and 16: keep the value before the last stage as a
// second output. Specialised per pipeline (Shader::pipeline_specialised), so that a matmul
// without an epilogue carries no branch for it and one with an epilogue only its own.
const EPILOGUE: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(4) var<storage, read> offsets: array<u32>;
// Bound to the offsets themselves when the call has no limits (never read then).
@group(0) @binding(5) var<storage, read> limits: array<u32>;
// Bound to the offsets themselves when the epilogue adds nothing (never read then).
@group(0) @binding(6) var<storage, read> addend: array<Elem>;
// What an activation's backward reads: a relu's output, or GELU's input. Bound to the offsets
// themselves when the epilogue takes no activation's backward (never read then).
@group(0) @binding(7) var<storage, read> saved: array<Elem>;
// A second output shaped like C (bit 16): the value before the epilogue's last stage, which the
// caller needs as well: the relu's output before the add, the sum before a relu's backward, or
// GELU's input. Bound to the device's unused buffer when the epilogue keeps nothing (never
// written then).
@group(0) @binding(8) var<storage, read_write> kept_out: array<Elem>;

// Whether the value before `stage` is kept: keeping is asked, the stage runs, and no later one.
fn keeps_before(stage: u32) -> bool {
    return (EPILOGUE & 16u) != 0u && (EPILOGUE & stage) != 0u && (EPILOGUE & ~16u) < (stage << 1u);
}

// Element `at` of C, `v`, after the epilogue.
fn epi(at: u32, v: Elem) -> Elem {
    var r = v;
    if (keeps_before(1u)) { kept_out[at] = r; }
    if ((EPILOGUE & 1u) != 0u) { r = max(r, Elem(0)); }
    if (keeps_before(2u)) { kept_out[at] = r; }
    if ((EPILOGUE & 2u) != 0u) { r = addend[at] + r; }
    if (keeps_before(4u)) { kept_out[at] = r; }
    if ((EPILOGUE & 4u) != 0u) { r = select(Elem(0), r, saved[at] > Elem(0)); }
    if (keeps_before(8u)) { kept_out[at] = r; }
    // elementwise.wgsl's gelu_backward, with the product as its gradient.
    if ((EPILOGUE & 8u) != 0u) { r = Elem(f32(r) * gelu_grad(f32(saved[at]))); }
    if (keeps_before(32u)) { kept_out[at] = r; }
    // elementwise.wgsl's gelu.
    if ((EPILOGUE & 32u) != 0u) { r = Elem(gelu_of(f32(r))); }
    return r;
}

// Elements `at`..`at + 3` of C after the epilogue.
fn epi4(at: u32, v: vec4<Elem>) -> vec4<Elem> {
    if (EPILOGUE == 0u) { return v; }
    return vec4<Elem>(epi(at, v.x), epi(at + 1u, v.y), epi(at + 2u, v.z), epi(at + 3u, v.w));
}

// The weight matrix of row group g: its index in B.
fn weight(g: u32) -> u32 {
    return g / p.blocks;
}

// How far into K a tile whose first row is row `r` of group g goes: all of K, or nothing when
// the tile starts past the group's live rows (its accumulators stay zero, and zeros are stored).
fn k_extent(g: u32, r: u32, k: u32) -> u32 {
    if (p.limit_stride != 0u && r >= limits[g * p.limit_stride]) {
        return 0u;
    }
    return k;
}

// Where each of the 8 rows of the block from row r of a group starting at row0 begins, in an
// operand whose rows are `stride` elements apart. Rows past the group's last (`last`, relative)
// repeat it: always a valid read, and never written.
fn block_rows(row0: u32, r: u32, last: u32, stride: u32) -> array<u32, 8> {
    return array<u32, 8>(
        (row0 + min(r, last)) * stride, (row0 + min(r + 1u, last)) * stride,
        (row0 + min(r + 2u, last)) * stride, (row0 + min(r + 3u, last)) * stride,
        (row0 + min(r + 4u, last)) * stride, (row0 + min(r + 5u, last)) * stride,
        (row0 + min(r + 6u, last)) * stride, (row0 + min(r + 7u, last)) * stride,
    );
}
