//! What a JSON document is, read only as far as it takes to tell ([`sniff`]): a Chrome trace is an
//! object with a `traceEvents` key or an array that is empty or whose first element has a `ph`, a
//! gangway bench report an object with a `schema`, an old bench result array one whose first
//! element has a bench result's `suite`, `case` or `adapter`. The viewer tells what a file holds
//! with it before it reads the whole.
//!
//! A trace is told at its `traceEvents` key or first element, so a large one is not read twice
//! (the rest is the import's to check). Serde stops a visit early only with an error, so the
//! visit records what it told and then fails, and what it told wins.

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// What a JSON document is, as [`sniff`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Document {
    /// A Chrome trace ([`super::parse_slice`] reads it).
    Trace,
    /// A gangway bench report (`crate::bench::Report`).
    BenchReport,
    /// An array of bench results from before the report's schema.
    OldBenchResults,
    /// An array of something else.
    OtherArray,
    /// Anything else: an object of neither kind, or a scalar.
    Unknown,
}

/// What the JSON text `json` is; an error says where text that is not JSON goes wrong.
pub fn sniff(json: &[u8]) -> Result<Document, String> {
    tell(&mut serde_json::Deserializer::from_slice(json)).map_err(|e| e.to_string())
}

/// [`sniff`] of a document already parsed.
pub fn sniff_value(v: &Value) -> Document {
    tell(v).unwrap_or(Document::Unknown)
}

#[derive(Deserialize)]
#[serde(field_identifier)]
enum TopKey {
    #[serde(rename = "traceEvents")]
    TraceEvents,
    #[serde(rename = "schema")]
    Schema,
    #[serde(other)]
    Other,
}

fn tell<'de, D: Deserializer<'de>>(de: D) -> Result<Document, D::Error> {
    let mut told = None;
    let read = de.deserialize_any(Sniff(&mut told));
    told.map_or(read, Ok)
}

struct Sniff<'a>(&'a mut Option<Document>);

impl Sniff<'_> {
    fn told<E: de::Error>(self, kind: Document) -> Result<Document, E> {
        *self.0 = Some(kind);
        Err(E::custom("told"))
    }
}

impl<'de> Visitor<'de> for Sniff<'_> {
    type Value = Document;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Document, A::Error> {
        let mut schema = false;
        while let Some(key) = map.next_key::<TopKey>()? {
            match key {
                TopKey::TraceEvents => return self.told(Document::Trace),
                TopKey::Schema => schema = true,
                TopKey::Other => {}
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(if schema {
            Document::BenchReport
        } else {
            Document::Unknown
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Document, A::Error> {
        // One element: small in a trace, as in a result list.
        let first: Option<Value> = seq.next_element()?;
        let has = |key: &str| first.as_ref().is_some_and(|f| f.get(key).is_some());
        if first.is_none() || has("ph") {
            self.told(Document::Trace)
        } else if has("suite") || has("case") || has("adapter") {
            self.told(Document::OldBenchResults)
        } else {
            self.told(Document::OtherArray)
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Document, E> {
        Ok(Document::Unknown)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Document, E> {
        Ok(Document::Unknown)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Document, E> {
        Ok(Document::Unknown)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Document, E> {
        Ok(Document::Unknown)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Document, E> {
        Ok(Document::Unknown)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Document, E> {
        Ok(Document::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::{Document, sniff, sniff_value};

    #[test]
    fn each_kind_is_told_and_text_that_is_not_json_is_an_error() {
        let cases: [(&str, Document); 8] = [
            (r#"{"traceEvents": [], "otherData": {}}"#, Document::Trace),
            (r#"{"x": 1, "traceEvents": [{"ph": "X"}]}"#, Document::Trace),
            (r#"[{"ph": "X", "ts": 0}]"#, Document::Trace),
            ("[]", Document::Trace),
            (r#"{"schema": 1, "results": []}"#, Document::BenchReport),
            (r#"[{"suite": "matmul"}]"#, Document::OldBenchResults),
            (r#"[{"a": 1}]"#, Document::OtherArray),
            (r#"{"a": 1}"#, Document::Unknown),
        ];
        for (text, want) in cases {
            assert_eq!(sniff(text.as_bytes()), Ok(want), "{text}");
            let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
            assert_eq!(sniff_value(&v), want, "{text}");
        }
        assert_eq!(sniff(b"3"), Ok(Document::Unknown));
        assert!(sniff(b"{\"a\" 1").is_err());
        // Told at its key: the rest is the import's to check.
        assert_eq!(sniff(b"{\"traceEvents\": [1"), Ok(Document::Trace));
    }
}
