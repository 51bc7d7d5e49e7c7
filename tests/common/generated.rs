//! Book pages the tests generate (the command-line reference, the kernels' limits): a page must
//! equal what its test makes now, and `GANGWAY_WRITE_DOCS=1` rewrites it.

use std::path::Path;

/// Fails unless `page` (relative to the crate) holds `text`; writes it first under
/// `GANGWAY_WRITE_DOCS=1`. `regenerate` is the command that does, for the failure message.
pub fn check_page(page: &str, text: &str, regenerate: &str) {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
    if std::env::var("GANGWAY_WRITE_DOCS").as_deref() == Ok("1") {
        std::fs::create_dir_all(page.parent().unwrap()).unwrap();
        std::fs::write(&page, text).unwrap();
    }
    let committed = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(
        committed == text,
        "{} is out of date: GANGWAY_WRITE_DOCS=1 {regenerate}",
        page.display()
    );
}
