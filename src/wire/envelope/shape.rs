//! The members of a request the layer reads, typed, and their reading by serde_json:
//! what [`scan`](super::scan) gives up on, and what it is tested against.

use std::marker::PhantomData;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};

/// What a parse finds in the top-level object: the envelope's members as raw JSON
/// text (`jsonrpc` and `method` absent when `null`, as optional members read), and
/// the typed params.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Message<'a> {
    pub(super) jsonrpc: Option<&'a str>,
    pub(super) id: Option<&'a str>,
    pub(super) method: Option<&'a str>,
    pub(super) params: Option<Params<'a>>,
    /// Known only to the scan: the params hold no `\u` escape and no number with
    /// an exponent or past 18 characters.
    pub(super) params_plain: bool,
}

/// Any JSON object, read in one pass without copying a member; fields it does not
/// name are skipped.
#[derive(Deserialize)]
struct RawMessage<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<&'a RawValue>,
    #[serde(default, borrow)]
    params: Option<Params<'a>>,
}

/// `params`, read in the same pass as the envelope: the members every owned route
/// reads, typed and borrowed from the body (the last one when a key repeats, as a
/// map keeps it); any other member is skipped. Any JSON value is accepted: one that
/// is not an object simply has none of the members.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Params<'a> {
    pub(super) meta: Option<Meta<'a>>,
    pub(super) task_id: Option<&'a str>,
    pub(super) name: Option<&'a str>,
    pub(super) input_responses: Option<&'a str>,
}

/// `params._meta`, as [`Params`] reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Meta<'a> {
    pub(super) is_object: bool,
    pub(super) version: Option<&'a str>,
    pub(super) capabilities: Option<Capabilities>,
}

/// `_meta`'s client capabilities: whether they are an object, and whether their
/// `extensions` (the last one) holds an object under the tasks extension's id.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Capabilities {
    pub(super) is_object: bool,
    pub(super) declared: bool,
}

/// `extensions` in the client capabilities: whether the tasks extension's entry
/// (the last one) is an object.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Extensions {
    pub(super) declared: bool,
}

/// Any JSON value, told only whether it is an object.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AnyValue {
    pub(super) is_object: bool,
}

/// An object read member by member as it is parsed: the names it reads, and what
/// it keeps of each. Any other value reads as [`Default`] (no members).
pub(super) trait Members<'a>: Default {
    /// The member names it reads; the index of a name is passed to `member`.
    const NAMES: &'static [&'static str];
    /// An object with no members yet.
    fn object() -> Self;
    /// Reads the value of the member named `NAMES[at]`.
    fn member<'de: 'a, M: MapAccess<'de>>(
        &mut self,
        at: usize,
        map: &mut M,
    ) -> Result<(), M::Error>;
}

impl<'a> Members<'a> for Params<'a> {
    const NAMES: &'static [&'static str] = &["_meta", "taskId", "name", "inputResponses"];
    fn object() -> Self {
        Params::default()
    }
    fn member<'de: 'a, M: MapAccess<'de>>(
        &mut self,
        at: usize,
        map: &mut M,
    ) -> Result<(), M::Error> {
        match at {
            0 => self.meta = Some(map.next_value()?),
            1 => self.task_id = Some(map.next_value::<&'de RawValue>()?.get()),
            2 => self.name = Some(map.next_value::<&'de RawValue>()?.get()),
            _ => self.input_responses = Some(map.next_value::<&'de RawValue>()?.get()),
        }
        Ok(())
    }
}

impl<'a> Members<'a> for Meta<'a> {
    const NAMES: &'static [&'static str] = &[META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES];
    fn object() -> Self {
        Meta {
            is_object: true,
            ..Meta::default()
        }
    }
    fn member<'de: 'a, M: MapAccess<'de>>(
        &mut self,
        at: usize,
        map: &mut M,
    ) -> Result<(), M::Error> {
        match at {
            0 => self.version = Some(map.next_value::<&'de RawValue>()?.get()),
            _ => self.capabilities = Some(map.next_value()?),
        }
        Ok(())
    }
}

impl<'a> Members<'a> for Capabilities {
    const NAMES: &'static [&'static str] = &["extensions"];
    fn object() -> Self {
        Capabilities {
            is_object: true,
            declared: false,
        }
    }
    fn member<'de: 'a, M: MapAccess<'de>>(
        &mut self,
        _: usize,
        map: &mut M,
    ) -> Result<(), M::Error> {
        self.declared = map.next_value::<Extensions>()?.declared;
        Ok(())
    }
}

impl<'a> Members<'a> for Extensions {
    const NAMES: &'static [&'static str] = &[EXTENSION_ID];
    fn object() -> Self {
        Extensions::default()
    }
    fn member<'de: 'a, M: MapAccess<'de>>(
        &mut self,
        _: usize,
        map: &mut M,
    ) -> Result<(), M::Error> {
        self.declared = map.next_value::<AnyValue>()?.is_object;
        Ok(())
    }
}

impl Members<'_> for AnyValue {
    const NAMES: &'static [&'static str] = &[];
    fn object() -> Self {
        AnyValue { is_object: true }
    }
    fn member<'de, M: MapAccess<'de>>(&mut self, _: usize, _: &mut M) -> Result<(), M::Error> {
        Ok(())
    }
}

/// Deserializes each [`Members`] type from any JSON value.
macro_rules! deserialize_members {
    ($($ty:ty),*) => {$(
        impl<'de: 'a, 'a> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(ObjectVisitor::<'a, $ty>(PhantomData))
            }
        }
    )*};
}
deserialize_members!(Params<'a>, Meta<'a>, Capabilities, Extensions, AnyValue);

struct ObjectVisitor<'a, T>(PhantomData<(&'a (), T)>);

impl<'de: 'a, 'a, T: Members<'a>> Visitor<'de> for ObjectVisitor<'a, T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<T, M::Error> {
        let mut out = T::object();
        while let Some(at) = map.next_key_seed(Name(T::NAMES))? {
            match at {
                Some(at) => out.member(at, &mut map)?,
                // Skipped without decoding, as `RawValue` skips.
                None => {
                    map.next_value::<&'de RawValue>()?;
                }
            }
        }
        Ok(out)
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<T, S::Error> {
        while seq.next_element::<&'de RawValue>()?.is_some() {}
        Ok(T::default())
    }

    fn visit_bool<E>(self, _: bool) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_i64<E>(self, _: i64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_str<E>(self, _: &str) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::default())
    }
}

/// A member name, read as the index of the name it equals among those given
/// (compared as decoded text, never copied).
struct Name(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Name {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Name {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|name| *name == key))
    }
}

/// The body read by serde_json: what [`scan`] gives up on, and what it is tested
/// against.
pub(super) fn parse_with_serde(body: &str) -> Result<Message<'_>, serde_json::Error> {
    let raw: RawMessage<'_> = serde_json::from_str(body)?;
    Ok(Message {
        jsonrpc: raw.jsonrpc.map(RawValue::get),
        id: raw.id.map(RawValue::get),
        method: raw.method.map(RawValue::get),
        params: raw.params,
        params_plain: false,
    })
}

/// A member that is present, `null` included, is `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}
