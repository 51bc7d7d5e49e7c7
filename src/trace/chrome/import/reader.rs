//! The lenient reader: the trace's JSON read straight into what the import keeps, one trace event
//! at a time, without a `serde_json::Value` of the whole trace. Fields are read leniently (any
//! JSON type; what a field must be is checked by the import, with errors naming the event),
//! unknown fields are read past, and a repeated key counts once, the last time.

use super::super::imported::PRODUCER;
use super::Import;
use crate::trace::track::TrackKind;
use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The fields of a trace event the import reads.
#[derive(Default)]
pub(super) struct Fields<'a> {
    pub(super) ph: Option<Scalar<'a>>,
    pub(super) name: Option<Scalar<'a>>,
    pub(super) cat: Option<Scalar<'a>>,
    pub(super) pid: Option<Scalar<'a>>,
    pub(super) tid: Option<Scalar<'a>>,
    pub(super) ts: Option<Scalar<'a>>,
    pub(super) dur: Option<Scalar<'a>>,
    pub(super) id: Option<Scalar<'a>>,
    pub(super) bind_id: Option<Scalar<'a>>,
    /// An instant's scope.
    pub(super) s: Option<Scalar<'a>>,
    /// Empty unless `args` is an object.
    pub(super) args: Args<'a>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
pub(super) enum Key {
    Ph,
    Name,
    Cat,
    Pid,
    Tid,
    Ts,
    Dur,
    Id,
    #[serde(rename = "bind_id")]
    BindId,
    S,
    Args,
    #[serde(other)]
    Other,
}

/// A process's `track` arg, as far as it could be read: what is missing or malformed is left
/// out (the kind then defaults to a device).
#[derive(Debug, Clone, Default)]
pub(super) struct TrackMeta {
    pub(super) kind: Option<TrackKind>,
    pub(super) stages: Vec<usize>,
    pub(super) rank: Option<usize>,
}

/// The `args` the import reads: of slices, the name and sort index of metadata (and gangway's
/// `track` of a process), and every other number (a counter's series).
#[derive(Default)]
pub(super) struct Args<'a> {
    pub(super) program: Option<Scalar<'a>>,
    pub(super) node: Option<Scalar<'a>>,
    pub(super) microbatch: Option<Scalar<'a>>,
    pub(super) clock: Option<Scalar<'a>>,
    pub(super) name: Option<Scalar<'a>>,
    /// gangway's pipeline op of a slice (`F`, `B`, `W`).
    pub(super) op: Option<Scalar<'a>>,
    /// gangway's transfer slice: its kind, direction and bytes.
    pub(super) transfer: Option<Scalar<'a>>,
    pub(super) direction: Option<Scalar<'a>>,
    pub(super) bytes: Option<Scalar<'a>>,
    /// gangway's [`Track`] of a process, beside its name.
    pub(super) track: Option<TrackMeta>,
    /// The numbers under other keys, each key once (the last, as in a `Value`). Allocated only
    /// when there is one: gangway's slices have none.
    pub(super) others: Vec<(Cow<'a, str>, f64)>,
}

impl Args<'_> {
    /// Every number in `args`, the known keys' included, by key.
    pub(super) fn numbers(&self) -> impl Iterator<Item = (&str, f64)> {
        let known = [
            ("program", &self.program),
            ("node", &self.node),
            ("microbatch", &self.microbatch),
            ("clock", &self.clock),
            ("name", &self.name),
            ("op", &self.op),
            ("transfer", &self.transfer),
            ("direction", &self.direction),
            ("bytes", &self.bytes),
        ];
        known
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.as_ref()?.as_f64()?)))
            .chain(self.others.iter().map(|(k, v)| (k.as_ref(), *v)))
    }

    /// The number under `key`.
    pub(super) fn number(&self, key: &str) -> Option<f64> {
        self.numbers().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

#[derive(Deserialize)]
#[serde(field_identifier)]
pub(super) enum TopKey {
    #[serde(rename = "traceEvents")]
    TraceEvents,
    #[serde(rename = "otherData")]
    OtherData,
    #[serde(other)]
    Other,
}

/// A field's JSON value: numbers and strings as they are (strings borrowed from the text where
/// they have no escapes), arrays and objects only noted.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Scalar<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(Cow<'a, str>),
    Array,
    Object,
}

impl Scalar<'_> {
    /// As `Value::as_u64`: a non-negative integer.
    pub(super) fn as_u64(&self) -> Option<u64> {
        match *self {
            Scalar::U64(n) => Some(n),
            Scalar::I64(n) => u64::try_from(n).ok(),
            _ => None,
        }
    }

    /// As `Value::as_f64`: any number.
    pub(super) fn as_f64(&self) -> Option<f64> {
        match *self {
            Scalar::U64(n) => Some(n as f64),
            Scalar::I64(n) => Some(n as f64),
            Scalar::F64(x) => Some(x),
            _ => None,
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// As JSON, for errors (containers elided).
impl fmt::Display for Scalar<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Null => f.write_str("null"),
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::U64(n) => write!(f, "{n}"),
            Scalar::I64(n) => write!(f, "{n}"),
            Scalar::F64(x) => write!(f, "{}", Value::from(*x)),
            Scalar::Str(s) => write!(f, "{}", Value::from(s.as_ref())),
            Scalar::Array => f.write_str("[…]"),
            Scalar::Object => f.write_str("{…}"),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Read(AnyScalar).deserialize(d)
    }
}

/// How a part of the trace is read from whatever JSON value is there: objects and arrays as it
/// says (by default read past, as [`Scalar::Object`] / [`Scalar::Array`]), anything else as a
/// [`Scalar`]. So a value of an unexpected type is this reader's to judge, never a serde error.
pub(super) trait Shape<'de>: Sized {
    type Out;

    fn scalar(self, value: Scalar<'de>) -> Self::Out;

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Out, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(self.scalar(Scalar::Object))
    }

    fn array<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Out, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(self.scalar(Scalar::Array))
    }

    fn read<D: Deserializer<'de>>(self, d: D) -> Result<Self::Out, D::Error> {
        Read(self).deserialize(d)
    }
}

/// The serde visitor (and seed) of a [`Shape`].
pub(super) struct Read<S>(pub(super) S);

impl<'de, S: Shape<'de>> DeserializeSeed<'de> for Read<S> {
    type Value = S::Out;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Out, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: Shape<'de>> Visitor<'de> for Read<S> {
    type Value = S::Out;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::I64(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::U64(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::F64(v)))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::Str(Cow::Borrowed(v))))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::Str(Cow::Owned(v.to_owned()))))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::Str(Cow::Owned(v))))
    }

    fn visit_unit<E: de::Error>(self) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::Null))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<S::Out, A::Error> {
        self.0.object(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<S::Out, A::Error> {
        self.0.array(seq)
    }
}

/// A field: any value.
pub(super) struct AnyScalar;

impl<'de> Shape<'de> for AnyScalar {
    type Out = Scalar<'de>;

    fn scalar(self, value: Scalar<'de>) -> Scalar<'de> {
        value
    }
}

/// The top level: a bare `traceEvents` list, or an object with one (the last, as in a
/// `Value`). Whether one was found.
pub(super) struct Top<'s>(pub(super) &'s mut Import);

impl<'de> Shape<'de> for Top<'_> {
    type Out = bool;

    fn scalar(self, _: Scalar<'de>) -> bool {
        false
    }

    fn array<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        List(self.0).array(seq)
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut found = false;
        while let Some(key) = map.next_key::<TopKey>()? {
            match key {
                TopKey::TraceEvents => {
                    // The last list counts, as in a `Value`; the marker may come before it.
                    let marker = self.0.marker;
                    *self.0 = Import {
                        marker,
                        ..Import::default()
                    };
                    found = map.next_value_seed(Read(List(&mut *self.0)))?;
                }
                TopKey::OtherData => {
                    self.0.marker = map.next_value_seed(Read(Marker))?;
                }
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// A `track` arg: its kind, stages and rank, when it is an object.
pub(super) struct TrackFields;

impl<'de> Shape<'de> for TrackFields {
    type Out = Option<TrackMeta>;

    fn scalar(self, _: Scalar<'de>) -> Option<TrackMeta> {
        None
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Out, A::Error> {
        let mut meta = TrackMeta::default();
        while let Some(key) = map.next_key_seed(Read(AnyScalar))? {
            match key.as_str() {
                Some("kind") => {
                    let kind: Scalar<'de> = map.next_value()?;
                    meta.kind = kind.as_str().and_then(TrackKind::of_word);
                }
                Some("stages") => meta.stages = map.next_value_seed(Read(Indices))?,
                Some("rank") => {
                    let rank: Scalar<'de> = map.next_value()?;
                    meta.rank = rank.as_u64().and_then(|r| usize::try_from(r).ok());
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(meta))
    }
}

/// A list of non-negative integers (anything else in it is left out).
pub(super) struct Indices;

impl<'de> Shape<'de> for Indices {
    type Out = Vec<usize>;

    fn scalar(self, _: Scalar<'de>) -> Vec<usize> {
        Vec::new()
    }

    fn array<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<usize>, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Read(AnyScalar))? {
            if let Some(i) = v.as_u64().and_then(|i| usize::try_from(i).ok()) {
                out.push(i);
            }
        }
        Ok(out)
    }
}

/// The value of `otherData`: whether it names gangway as the producer.
pub(super) struct Marker;

impl<'de> Shape<'de> for Marker {
    type Out = bool;

    fn scalar(self, _: Scalar<'de>) -> bool {
        false
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut marked = false;
        while let Some(key) = map.next_key_seed(Read(AnyScalar))? {
            let value: Scalar<'de> = map.next_value()?;
            if key.as_str() == Some("producer") {
                marked = value.as_str() == Some(PRODUCER);
            }
        }
        Ok(marked)
    }
}

/// The value of `traceEvents`: whether it is a list.
pub(super) struct List<'s>(pub(super) &'s mut Import);

impl<'de> Shape<'de> for List<'_> {
    type Out = bool;

    fn scalar(self, _: Scalar<'de>) -> bool {
        false
    }

    fn array<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        self.0.read_list(seq)?;
        Ok(true)
    }
}

/// One element of `traceEvents`: its fields, or `None` if it is not an object.
pub(super) struct EventFields;

impl<'de> Shape<'de> for EventFields {
    type Out = Option<Fields<'de>>;

    fn scalar(self, _: Scalar<'de>) -> Option<Fields<'de>> {
        None
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Out, A::Error> {
        let mut ev = Fields::default();
        while let Some(key) = map.next_key::<Key>()? {
            let field = match key {
                Key::Ph => &mut ev.ph,
                Key::Name => &mut ev.name,
                Key::Cat => &mut ev.cat,
                Key::Pid => &mut ev.pid,
                Key::Tid => &mut ev.tid,
                Key::Ts => &mut ev.ts,
                Key::Dur => &mut ev.dur,
                Key::Id => &mut ev.id,
                Key::BindId => &mut ev.bind_id,
                Key::S => &mut ev.s,
                Key::Args => {
                    ev.args = map.next_value_seed(Read(ArgFields))?;
                    continue;
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *field = Some(map.next_value()?);
        }
        Ok(Some(ev))
    }
}

/// An event's `args`: empty unless an object.
pub(super) struct ArgFields;

impl<'de> Shape<'de> for ArgFields {
    type Out = Args<'de>;

    fn scalar(self, _: Scalar<'de>) -> Args<'de> {
        Args::default()
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Args<'de>, A::Error> {
        let mut args = Args::default();
        while let Some(key) = map.next_key_seed(Read(AnyScalar))? {
            let Scalar::Str(key) = key else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let field = match key.as_ref() {
                "program" => &mut args.program,
                "node" => &mut args.node,
                "microbatch" => &mut args.microbatch,
                "clock" => &mut args.clock,
                "name" => &mut args.name,
                "op" => &mut args.op,
                "transfer" => &mut args.transfer,
                "direction" => &mut args.direction,
                "bytes" => &mut args.bytes,
                "track" => {
                    args.track = map.next_value_seed(Read(TrackFields))?;
                    continue;
                }
                _ => {
                    let value: Scalar<'de> = map.next_value()?;
                    args.others.retain(|(k, _)| *k != key);
                    if let Some(x) = value.as_f64() {
                        args.others.push((key, x));
                    }
                    continue;
                }
            };
            *field = Some(map.next_value()?);
        }
        Ok(args)
    }
}
