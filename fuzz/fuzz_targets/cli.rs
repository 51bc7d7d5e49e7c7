//! The command line through clap, with the binary's own definitions (`src/bin/gangway/cli.rs`): any
//! arguments parse or give clap's error, which must render; nothing panics. Arguments are the
//! input cut at NUL bytes (lossy UTF-8: a shell passes any bytes, clap sees strings).
#![no_main]

use clap::{CommandFactory, Parser};
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)] // the binary's commands use what the parser does not
#[path = "../../src/bin/gangway/cli.rs"]
mod cli;

fuzz_target!(|data: &[u8]| {
    let args = std::iter::once("gangway".to_string()).chain(
        data.split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned()),
    );
    match cli::Cli::try_parse_from(args) {
        Ok(parsed) => {
            let _ = format!("{parsed:?}");
        }
        Err(e) => {
            let _ = e.render().to_string();
        }
    }
    // Clap's own consistency checks of the definitions (cheap after the first run).
    static CHECKED: std::sync::Once = std::sync::Once::new();
    CHECKED.call_once(|| cli::Cli::command().debug_assert());
});
