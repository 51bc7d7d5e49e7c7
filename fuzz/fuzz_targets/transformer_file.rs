//! Transformer files (`gangway train lm --resume`, `generate`, `eval lm`, `export`, `import`):
//! any bytes are an error or a file that survives a round trip, never a panic, hang or oversized
//! allocation. Each input is also read as weights from elsewhere with a configuration given
//! (`gangway import --config`), which skips the CRC-32 when the file has none, to reach the
//! checks behind it.
#![no_main]

use gangway::transformer::{TransformerCheckpoint, TransformerConfig};
use libfuzzer_sys::fuzz_target;

/// The configuration of the committed seeds (`seeds/transformer_file`).
fn seed_config() -> TransformerConfig {
    TransformerConfig {
        context: 4,
        model: 4,
        heads: 1,
        layers: 2,
        hidden: 4,
        experts: 2,
        ..TransformerConfig::default()
    }
}

fuzz_target!(|data: &[u8]| {
    for loaded in [
        TransformerCheckpoint::from_bytes(data),
        TransformerCheckpoint::from_bytes_with(data, Some(seed_config())),
    ] {
        if let Ok(c) = loaded {
            let again = c.to_bytes().expect("a loaded file saves");
            let back = TransformerCheckpoint::from_bytes(&again).expect("reloads");
            // NaN cannot load (values are checked finite), so equality is exact.
            assert_eq!(back, c);
        }
    }
});
