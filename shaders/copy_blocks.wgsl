// Copies blocks of rows between buffers of 32-bit words: block b moves rows
// src_row..src_row+rows of `src` to dst_row.. of `dst`. All-to-all packs per-destination segments
// and unpacks received ones with it; the host only builds the small block table from the counts.

struct Params {
    row_words: u32,
    blocks: u32,
    _pad0: u32,
    _pad1: u32,
}

struct Block {
    src_row: u32,
    dst_row: u32,
    rows: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> table: array<Block>;
@group(0) @binding(2) var<storage, read> src: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = gid.x;
    let b = gid.y;
    if (w >= p.row_words || b >= p.blocks) {
        return;
    }
    let blk = table[b];
    for (var r = gid.z; r < blk.rows; r += nwg.z) {
        dst[(blk.dst_row + r) * p.row_words + w] = src[(blk.src_row + r) * p.row_words + w];
    }
}
