//! Markdown tables, as `gangway bench`, `plan`, `eval btm` and the pipeline command print them: a
//! foundation, so the workloads and the benchmarks that measure them both use it without using
//! each other.

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
