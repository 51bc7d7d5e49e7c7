//! A [`TransformerConfig`] as a JSON file a person writes (`gangway import --config`, `train lm
//! --init FILE --config JSON`): which fields are required, the defaults of the optional ones,
//! and [`TransformerConfig::from_json`], whose error names every missing field at once (and
//! every unknown one, so a typo is not silently a default). The `gangway.config` metadata of
//! gangway's own files, which gangway wrote whole, is read by plain serde (`train::checkpoint`),
//! with the same defaults.

use super::TransformerConfig;
use crate::{Error, Result};

/// The fields a file must give: the sizes, and whether the head is tied (that decides which
/// tensors the weights hold).
pub const REQUIRED: [&str; 9] = [
    "context",
    "model",
    "heads",
    "layers",
    "hidden",
    "moe_every",
    "experts",
    "top_k",
    "tied",
];

/// The fields a file may leave out, each with its default as the book states it.
pub const OPTIONAL: [(&str, &str); 7] = [
    ("expert_hidden", "0, meaning `hidden`"),
    ("capacity_factor", "1.25"),
    ("normalize_gates", "true"),
    ("aux_alpha", "0.01"),
    ("z_loss", "0"),
    ("eps", "1e-5"),
    ("seed", "0"),
];

pub(super) fn default_capacity_factor() -> f32 {
    TransformerConfig::default().capacity_factor
}

pub(super) fn default_normalize_gates() -> bool {
    TransformerConfig::default().normalize_gates
}

pub(super) fn default_aux_alpha() -> f32 {
    TransformerConfig::default().aux_alpha
}

pub(super) fn default_eps() -> f32 {
    TransformerConfig::default().eps
}

impl TransformerConfig {
    /// The configuration in `text`, a JSON object of the fields above, validated. Every missing
    /// required field and every unknown field is named in one error.
    pub fn from_json(text: &str) -> Result<Self> {
        let bad = |reason: String| Error::InvalidArgument {
            what: "transformer config",
            reason,
        };
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let Some(object) = value.as_object() else {
            return Err(bad("a configuration is a JSON object".into()));
        };
        let missing: Vec<&str> = REQUIRED
            .iter()
            .copied()
            .filter(|f| !object.contains_key(*f))
            .collect();
        let unknown: Vec<&str> = object
            .keys()
            .map(String::as_str)
            .filter(|k| !REQUIRED.contains(k) && !OPTIONAL.iter().any(|(f, _)| f == k))
            .collect();
        let mut problems = Vec::new();
        if !missing.is_empty() {
            problems.push(format!("missing fields: {}", missing.join(", ")));
        }
        if !unknown.is_empty() {
            problems.push(format!("unknown fields: {}", unknown.join(", ")));
        }
        if !problems.is_empty() {
            let optional: Vec<String> = OPTIONAL
                .iter()
                .map(|(f, default)| format!("{f} ({default})"))
                .collect();
            return Err(bad(format!(
                "{}; required: {}; optional, with their defaults: {}",
                problems.join("; "),
                REQUIRED.join(", "),
                optional.join(", ")
            )));
        }
        let config: TransformerConfig =
            serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> serde_json::Map<String, serde_json::Value> {
        match serde_json::to_value(TransformerConfig::small()) {
            Ok(serde_json::Value::Object(m)) => m,
            other => panic!("a config serializes as an object: {other:?}"),
        }
    }

    #[test]
    fn the_lists_cover_every_field_and_agree_with_serde() {
        let fields: Vec<String> = full().keys().cloned().collect();
        let listed = REQUIRED.len() + OPTIONAL.len();
        assert_eq!(fields.len(), listed, "{fields:?}");
        for f in &fields {
            let mut m = full();
            m.remove(f);
            let text = serde_json::Value::Object(m).to_string();
            let required = REQUIRED.contains(&f.as_str());
            // serde itself agrees on which fields may be left out.
            let by_serde = serde_json::from_str::<TransformerConfig>(&text).is_err();
            assert_eq!(required, by_serde, "{f}");
            assert_eq!(
                TransformerConfig::from_json(&text).is_err(),
                required,
                "{f}"
            );
        }
    }

    #[test]
    fn defaults_are_the_ones_stated() {
        let mut m = full();
        for (f, _) in OPTIONAL {
            m.remove(f);
        }
        let c = TransformerConfig::from_json(&serde_json::Value::Object(m).to_string())
            .expect("the required fields alone make a config");
        let d = TransformerConfig::default();
        assert_eq!(c.expert_hidden, 0);
        assert_eq!(
            (
                c.capacity_factor,
                c.normalize_gates,
                c.aux_alpha,
                c.z_loss,
                c.eps,
                c.seed
            ),
            (1.25, true, 0.01, 0.0, 1e-5, 0)
        );
        assert_eq!(
            (d.capacity_factor, d.aux_alpha, d.eps),
            (c.capacity_factor, c.aux_alpha, c.eps)
        );
    }

    #[test]
    fn every_missing_and_unknown_field_is_named_at_once() {
        let text = r#"{"context": 8, "model": 16, "layers": 1, "contxt": 8}"#;
        let err = TransformerConfig::from_json(text)
            .expect_err("fields are missing")
            .to_string();
        assert!(
            err.contains("missing fields: heads, hidden, moe_every, experts, top_k, tied"),
            "{err}"
        );
        assert!(err.contains("unknown fields: contxt"), "{err}");
        assert!(err.contains("seed (0)"), "{err}");
        for bad in ["[]", "{", "7"] {
            assert!(TransformerConfig::from_json(bad).is_err(), "{bad}");
        }
    }
}
