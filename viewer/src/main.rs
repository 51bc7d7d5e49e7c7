//! `gangway-viewer`: the egui desktop app. Not built yet: the viewer issue fills this crate once
//! the scheduler's event stream exists. Until then it says so and exits non-zero.

fn main() -> std::process::ExitCode {
    eprintln!(
        "gangway-viewer {}: the desktop viewer is not implemented yet (see the viewer issue); \
         use `gangway devices`, `gangway demo` and `gangway bench matmul` meanwhile",
        env!("CARGO_PKG_VERSION")
    );
    std::process::ExitCode::FAILURE
}
