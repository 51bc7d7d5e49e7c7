//! The benchmark suites behind `gangway bench`. Each result is a flat, serializable record so runs
//! on different machines can be compared; [`markdown_table`] renders them for people.

pub mod matmul;

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
