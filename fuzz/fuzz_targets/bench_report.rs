//! `gangway bench --json` reports as `bench compare` and the viewer read them: parsed, then
//! tabled, narrowed to an adapter and compared with themselves.
#![no_main]

use gangway::bench::Report;
use gangway::bench::compare::{Pairing, compare};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(report) = Report::parse(text) else {
        return;
    };
    let _ = report.table();
    let _ = report.failures().count();
    for pairing in [Pairing::SameAdapter, Pairing::AnyAdapter] {
        if let Ok(c) = compare(&report, &report, pairing) {
            let _ = c.table();
        }
    }
    if let Ok(one) = report.only_adapter("0") {
        let _ = one.table();
    }
    let again = Report::parse(&report.to_json()).expect("a loaded report reloads");
    assert_eq!(again.results.len(), report.results.len());
});
