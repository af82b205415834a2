//! [`RawObject`]: a JSON object whose members stay as the client wrote them, for
//! the bodies the layer edits before forwarding.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// A JSON object read one level deep: each member's value is kept as raw text, so
/// writing the object back changes nothing inside a value the layer did not touch
/// (a number past `f64`, `-0`, `1.0000000000000000001` stay byte for byte). Members
/// keep their order; a repeated key is kept as written, and read as its last value.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawObject(Vec<(String, Box<RawValue>)>);

impl RawObject {
    /// The object in `text`; `None` when `text` is not one JSON object.
    pub(crate) fn parse(text: &[u8]) -> Option<RawObject> {
        serde_json::from_slice(text).ok()
    }

    /// The value of `key` (the last one when it repeats).
    pub(crate) fn get(&self, key: &str) -> Option<&RawValue> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| &**v)
    }

    /// Removes every member named `key`; whether there was one.
    pub(crate) fn remove(&mut self, key: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|(k, _)| k != key);
        self.0.len() != before
    }

    /// Sets `key` to `value`, in place of any member of that name.
    pub(crate) fn insert(&mut self, key: &str, value: impl Serialize) {
        let Ok(value) = serde_json::value::to_raw_value(&value) else {
            return;
        };
        self.remove(key);
        self.0.push((key.to_owned(), value));
    }

    /// Runs `edit` on the object at `path` (each step a member holding an object)
    /// and writes the result back in place; `false`, with nothing changed, when a
    /// step is missing or not an object, or when `edit` answers `false`.
    pub(crate) fn edit(
        &mut self,
        path: &[&str],
        edit: impl FnOnce(&mut RawObject) -> bool,
    ) -> bool {
        let Some((first, rest)) = path.split_first() else {
            return edit(self);
        };
        let Some(slot) = self.0.iter_mut().rev().find(|(k, _)| k == first) else {
            return false;
        };
        let Some(mut inner) = RawObject::parse(slot.1.get().as_bytes()) else {
            return false;
        };
        if !inner.edit(rest, edit) {
            return false;
        }
        match serde_json::value::to_raw_value(&inner) {
            Ok(raw) => {
                slot.1 = raw;
                true
            }
            Err(_) => false,
        }
    }

    /// The object as JSON text.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(RawObject(members))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXACT: &str = r#"{"big":123456789012345678901234567890,"fine":1.0000000000000000001,"zero":-0,"huge":1E400,"deep":[-0.0,{"x":1e-400}]}"#;

    #[test]
    fn values_the_layer_does_not_touch_stay_byte_for_byte() {
        let text = format!(
            r#"{{"id":7,"params":{{"a":{EXACT},"n":{{"taskIds":["x"],"keep":{EXACT}}}}}}}"#
        );
        let mut object = RawObject::parse(text.as_bytes()).unwrap();
        assert!(object.edit(&["params", "n"], |n| n.remove("taskIds")));
        let out = String::from_utf8(object.to_vec()).unwrap();
        assert_eq!(
            out,
            format!(r#"{{"id":7,"params":{{"a":{EXACT},"n":{{"keep":{EXACT}}}}}}}"#)
        );
    }

    #[test]
    fn edits_that_find_nothing_change_nothing() {
        let mut object = RawObject::parse(br#"{"params":{"n":[1]},"x":1}"#).unwrap();
        assert!(!object.edit(&["params", "n"], |_| true), "not an object");
        assert!(!object.edit(&["params", "m"], |_| true), "missing");
        assert!(!object.edit(&["params"], |p| p.remove("absent")));
        assert_eq!(object.to_vec(), br#"{"params":{"n":[1]},"x":1}"#);
        assert!(RawObject::parse(b"[]").is_none());
        assert!(RawObject::parse(b"{").is_none());
    }

    #[test]
    fn repeated_keys_read_as_the_last_and_go_together() {
        let mut object = RawObject::parse(br#"{"a":1,"b":2,"a":3}"#).unwrap();
        assert_eq!(object.get("a").unwrap().get(), "3");
        object.insert("a", "new");
        assert_eq!(object.to_vec(), br#"{"b":2,"a":"new"}"#);
        assert!(object.remove("b"));
        assert!(object.get("b").is_none());
    }
}
