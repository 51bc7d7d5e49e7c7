//! WGSL parsed once per process. Every device's pipeline for one shader text (each virtual
//! device of an adapter, every adapter) is made from the same naga module, and a kernel's needs
//! are read from it too, where each device had parsed the text again. What is left per device
//! is wgpu's validation of the module against that device's features and limits, and the
//! driver's compile.
//!
//! Keyed by the text itself, so two shaders can never share a module by a name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// The naga module of `source`, parsed on first use; a parse error is naga's message, with the
/// source lines it points at.
pub(super) fn module(source: &str) -> Result<Arc<naga::Module>, String> {
    static MODULES: OnceLock<Mutex<HashMap<String, Arc<naga::Module>>>> = OnceLock::new();
    let modules = MODULES.get_or_init(Mutex::default);
    if let Some(m) = modules
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(source)
    {
        return Ok(m.clone());
    }
    // Parsed outside the lock: two threads parsing one text at once both succeed alike.
    let parsed =
        Arc::new(naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?);
    modules
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(source.to_string(), parsed.clone());
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::module;
    use std::sync::Arc;

    #[test]
    fn one_text_is_parsed_once_and_a_bad_one_names_its_line() {
        let text = "@compute @workgroup_size(1) fn main() {}\n";
        let (a, b) = (module(text).unwrap(), module(text).unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.entry_points.len(), 1);
        let other = module("@compute @workgroup_size(2) fn main() {}\n").unwrap();
        assert!(!Arc::ptr_eq(&a, &other));
        let err = module("fn main( {}\n").unwrap_err();
        assert!(err.contains("fn main( {}"), "{err}");
    }
}
