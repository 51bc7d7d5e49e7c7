// Shared by every matmul shader (prepended by the launcher): the call's shape and the group row
// offsets. Layouts: A is [M, K] ([K, M] with trans_a); B is [K, N] or [G, K, N] ([N, K] / [G, N, K]
// with trans_b); C is [M, N]. Rows offsets[g]..offsets[g+1] of C use B[g], at most
// max_group_rows of them (the static bound that sizes the grid).

struct Params {
    m: u32,
    n: u32,
    k: u32,
    groups: u32,
    trans_a: u32,
    trans_b: u32,
    max_group_rows: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(4) var<storage, read> offsets: array<u32>;
