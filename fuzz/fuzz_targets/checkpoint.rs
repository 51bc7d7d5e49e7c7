//! The MoE LM's files of the formats before safetensors (`GWMOETR` trainer checkpoints and
//! `GWMOELM` ELM parameter files, which still load: `gangway::moe::legacy`): any bytes are an
//! error or a checkpoint that survives a round trip (saved as safetensors), never a panic, hang or
//! oversized allocation. The CRC-32 trailer would stop almost every mutation at the door, so each
//! input is also tried re-sealed with a valid trailer, to reach the parser behind it.
#![no_main]

use gangway::moe::{MoeLmConfig, MoeLmParams};
use gangway::train::Checkpoint;
use libfuzzer_sys::fuzz_target;

/// `data` with its last 4 bytes replaced by the CRC-32 of everything after the 8-byte magic.
fn resealed(data: &[u8]) -> Option<Vec<u8>> {
    let body = data.get(..data.len().checked_sub(4)?)?;
    let mut out = body.to_vec();
    out.extend_from_slice(&crc32fast::hash(body.get(8..)?).to_le_bytes());
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    for bytes in std::iter::once(data.to_vec()).chain(resealed(data)) {
        if let Ok(c) = Checkpoint::<MoeLmConfig>::from_bytes(&bytes) {
            let again = c.to_bytes().expect("a loaded checkpoint saves");
            assert_eq!(
                Checkpoint::<MoeLmConfig>::from_bytes(&again).expect("reloads"),
                c
            );
        }
        if let Ok(p) = MoeLmParams::from_bytes(&bytes) {
            let again = p.to_bytes().expect("loaded parameters save");
            // NaN payloads compare unequal: compare the bytes instead.
            assert_eq!(
                MoeLmParams::from_bytes(&again)
                    .expect("reloads")
                    .to_bytes()
                    .ok(),
                Some(again)
            );
        }
    }
});
