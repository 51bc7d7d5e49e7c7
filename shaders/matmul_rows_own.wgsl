// How a vec4 matmul kernel gets A's 8 rows (prepended after matmul_common.wgsl): each invocation
// loads all 8 itself. A CPU driver runs neighbouring invocations as SIMD lanes, and these loads
// have one address for all of them, issued as a gather each. The kernel's body (`block`,
// `AVal`, `a_at`) comes from the kernel's own file; matmul_rows_subgroup.wgsl is the other way.

@compute @workgroup_size(16, 4, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    block(gid, 0u);
}

// Element `at` of each of A's rows that start at `rows` (`mine` is the subgroup way's).
fn load_a8(rows: array<u32, 8>, mine: u32, at: u32) -> array<AVal, 8> {
    return array<AVal, 8>(
        a_at(rows[0] + at), a_at(rows[1] + at), a_at(rows[2] + at), a_at(rows[3] + at),
        a_at(rows[4] + at), a_at(rows[5] + at), a_at(rows[6] + at), a_at(rows[7] + at),
    );
}
