//! Chrome trace-event JSON as the viewer opens it: parsed into events, written back out, and the
//! result must pass the trace structure check and parse again to as many events. Read from the
//! text and from its `Value`, a trace must come out the same, errors included; read as a file
//! (gzip, an unclosed array), and summed up as `gangway trace` does, never a panic.
#![no_main]

use gangway::trace::chrome;
use gangway::trace::summary::TraceSummary;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Whatever the bytes, reading them is a result, never a panic.
    if let Ok(trace) = chrome::read(data) {
        let _ = TraceSummary::of(&trace, 10);
    }
    let sliced = chrome::parse_slice(data);
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = chrome::check(&value);
    let parsed = chrome::parse(&value);
    assert_eq!(sliced, parsed, "the text and its Value read differently");
    let Ok(trace) = parsed else {
        return;
    };
    let out = chrome::to_json(&trace.events, &trace.tracks);
    if let Err(e) = chrome::check(&out) {
        panic!("an imported trace exports to an invalid one: {e}");
    }
    let again = chrome::parse_slice(out.to_string().as_bytes()).expect("an exported trace imports");
    assert_eq!(again.events.len(), trace.events.len());
});
