//! Records the git commit gangway was built from, for `gangway bench` reports
//! (`GANGWAY_GIT_HASH` overrides it, e.g. for builds outside a checkout).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=GANGWAY_GIT_HASH");
    let hash = std::env::var("GANGWAY_GIT_HASH").ok().or_else(|| {
        let out = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    });
    // Rebuild when HEAD moves: HEAD itself (branch switches) and the branch it points at.
    if let Ok(head) = std::fs::read_to_string(".git/HEAD") {
        println!("cargo:rerun-if-changed=.git/HEAD");
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=.git/{branch}");
        }
    }
    println!(
        "cargo:rustc-env=GANGWAY_GIT_HASH={}",
        hash.unwrap_or_else(|| "unknown".into())
    );
}
