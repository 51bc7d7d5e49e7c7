//! The benchmark suites behind `gangway bench`. Each result is a flat, serializable record so runs
//! on different machines can be compared; [`markdown_table`] renders them for people.

pub mod btm;
pub mod dispatch;
pub mod matmul;
pub mod moe;
pub mod pipeline;

/// Renders rows of cells as a Markdown table.
pub fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        " --- |".repeat(header.len())
    );
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

/// Runs `f` `warmup` times untimed, then `reps` times timed; the median wall time in seconds.
pub fn median_seconds(
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> crate::Result<()>,
) -> crate::Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    let mut samples = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let start = std::time::Instant::now();
        f()?;
        samples.push(start.elapsed().as_secs_f64());
    }
    Ok(crate::kernels::autotune::median(&mut samples))
}
