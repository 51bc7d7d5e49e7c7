//! Chrome trace-event JSON as the viewer opens it: parsed into events, written back out, and the
//! result must pass the trace structure check and parse again to the same events.
#![no_main]

use gangway::trace::chrome;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = chrome::check(&value);
    let Ok((events, names)) = chrome::parse(&value) else {
        return;
    };
    let out = chrome::to_json(&events, &names);
    if let Err(e) = chrome::check(&out) {
        panic!("an imported trace exports to an invalid one: {e}");
    }
    let (again, _) = chrome::parse(&out).expect("an exported trace imports");
    assert_eq!(again.len(), events.len());
});
