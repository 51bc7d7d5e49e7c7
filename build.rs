//! Records the git commit gangway was built from, for `gangway bench` reports
//! (`GANGWAY_GIT_HASH` overrides it, e.g. for builds outside a checkout), and writes the
//! multi-tensor Adam shader out once per slot count from its template (`shaders/adam.wgsl`).

use std::process::Command;

/// Slot counts the Adam template is written out for (`adam_1.wgsl`..): `src/kernels/optim.rs`
/// has a shader for each.
const ADAM_SLOTS: usize = 8;

/// The template with each `@each slot` .. `@end` block once per slot `j` of `slots`.
fn adam_source(template: &str, slots: usize) -> String {
    let mut out = String::new();
    let mut block: Option<Vec<&str>> = None;
    for line in template.lines() {
        match (&mut block, line.trim()) {
            (None, "// @each slot") => block = Some(Vec::new()),
            (Some(lines), "// @end") => {
                for j in 0..slots {
                    for l in lines.iter() {
                        let mut l = l.replace("{j}", &j.to_string());
                        for (k, b) in ["{b0}", "{b1}", "{b2}", "{b3}"].iter().enumerate() {
                            l = l.replace(b, &(4 * j + 1 + k).to_string());
                        }
                        out.push_str(&l);
                        out.push('\n');
                    }
                }
                block = None;
            }
            (Some(lines), _) => lines.push(line),
            (None, _) => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

fn main() {
    println!("cargo:rerun-if-changed=shaders/adam.wgsl");
    println!("cargo:rerun-if-changed=build.rs");
    let out_dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let template =
        std::fs::read_to_string("shaders/adam.wgsl").expect("shaders/adam.wgsl is readable");
    for slots in 1..=ADAM_SLOTS {
        let path = std::path::Path::new(&out_dir).join(format!("adam_{slots}.wgsl"));
        std::fs::write(path, adam_source(&template, slots)).expect("OUT_DIR is writable");
    }
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
