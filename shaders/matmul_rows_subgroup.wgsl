// How a vec4 matmul kernel gets A's 8 rows where the adapter has subgroups of at least 8 lanes
// (the launcher checks): lane j < 8 loads row j's element (`mine`) and subgroupBroadcast hands
// it to every lane, one load where matmul_rows_own.wgsl has 8. The workgroup is one row of 32
// invocations, so all lanes of any subgroup (one workgroup's at most) share the row block,
// whatever the lane order; the body returns no lane before the last broadcast. Any subgroup size
// of 8 or more works: 8, 16 and 32 lanes split the workgroup into whole subgroups, each with its
// own lanes 0-7; at 64 (AMD's wave64) the workgroup is one subgroup with 32 lanes active.

@compute @workgroup_size(32, 1, 1)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    block(gid, lane);
}

fn load_a8(rows: array<u32, 8>, mine: u32, at: u32) -> array<AVal, 8> {
    let v = a_at(mine + at);
    return array<AVal, 8>(
        subgroupBroadcast(v, 0u), subgroupBroadcast(v, 1u),
        subgroupBroadcast(v, 2u), subgroupBroadcast(v, 3u),
        subgroupBroadcast(v, 4u), subgroupBroadcast(v, 5u),
        subgroupBroadcast(v, 6u), subgroupBroadcast(v, 7u),
    );
}
