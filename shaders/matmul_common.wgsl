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
