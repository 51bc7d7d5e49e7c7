//! The matmul autotune cache (`$GANGWAY_CACHE_DIR/autotune.json`): any bytes are an error or a
//! cache that writes back and reloads.
#![no_main]

use gangway::kernels::autotune::Autotuner;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(tuner) = Autotuner::parse(data, None) else {
        return;
    };
    let text = tuner.to_json().expect("a loaded cache serialises");
    let again = Autotuner::parse(text.as_bytes(), None).expect("reloads");
    assert_eq!(again.to_json().ok(), Some(text));
});
