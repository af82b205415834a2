//! [`TaskId`]: the unguessable identifier of a task and its text form.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::InvalidTaskId;

/// An unguessable task identifier: 32 bytes from the operating system's CSPRNG.
///
/// The id is the only thing standing between a task and anyone who learns it, so it
/// behaves like a secret: its `Debug` output is redacted and the crate never logs it.
/// Its text form (`Display`, `FromStr`, serde) is 43 characters of base64url, safe to
/// carry in an `Mcp-Name` header as is.
///
/// ```
/// use mcp_tasks::TaskId;
///
/// let id = TaskId::random();
/// let text = id.to_string();
/// assert_eq!(text.len(), TaskId::LEN);
/// assert_eq!(text.parse::<TaskId>(), Ok(id));
/// assert_eq!(format!("{id:?}"), "TaskId(<redacted>)");
/// assert!("not-an-id".parse::<TaskId>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId([u8; TaskId::BYTES]);

impl TaskId {
    /// Number of random bytes behind an id (32).
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    ///
    /// assert_eq!(TaskId::random().as_bytes().len(), TaskId::BYTES);
    /// ```
    pub const BYTES: usize = 32;
    /// Length of an id in its text form (43: base64url, no padding).
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    ///
    /// assert_eq!(TaskId::random().to_string().len(), TaskId::LEN);
    /// ```
    pub const LEN: usize = 43;

    /// Draws a fresh id from the operating system's random source.
    ///
    /// # Panics
    ///
    /// Panics only if the operating system cannot provide randomness at all, in which
    /// case no id could be safe.
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    ///
    /// assert_ne!(TaskId::random(), TaskId::random());
    /// ```
    pub fn random() -> Self {
        use rand::TryRng as _;
        let mut bytes = [0u8; Self::BYTES];
        rand::rngs::SysRng
            .try_fill_bytes(&mut bytes)
            .expect("the operating system's random source is unavailable");
        TaskId(bytes)
    }

    /// The raw random bytes, for stores that key on binary values.
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    ///
    /// let id = TaskId::random();
    /// let key: Vec<u8> = id.as_bytes().to_vec(); // e.g. a `bytea` primary key
    /// assert_eq!(key.len(), 32);
    /// ```
    pub fn as_bytes(&self) -> &[u8; Self::BYTES] {
        &self.0
    }

    /// Rebuilds an id from the bytes returned by [`TaskId::as_bytes`].
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    ///
    /// let id = TaskId::random();
    /// assert_eq!(TaskId::from_bytes(*id.as_bytes()), id);
    /// ```
    pub fn from_bytes(bytes: [u8; Self::BYTES]) -> Self {
        TaskId(bytes)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TaskId(<redacted>)")
    }
}

/// base64url's alphabet. An id's text is written and read here by hand rather than
/// by the `base64` crate's general engine, at a fraction of the cost of every poll;
/// a test holds the two to the same text and the same refusals.
pub(super) const ID_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Each byte's value in [`ID_ALPHABET`], 0xFF for a byte outside it.
static ID_DIGITS: [u8; 256] = {
    let mut table = [0xFF; 256];
    let mut at = 0;
    while at < 64 {
        table[ID_ALPHABET[at] as usize] = at as u8;
        at += 1;
    }
    table
};

impl TaskId {
    /// The text form: ten groups of three bytes as four characters, then the last
    /// two bytes as three (unpadded).
    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let b = &self.0;
        let mut out = [0u8; Self::LEN];
        let sextet = |n: u32, shift: u32| ID_ALPHABET[(n >> shift & 63) as usize];
        for group in 0..10 {
            let n = u32::from(b[3 * group]) << 16
                | u32::from(b[3 * group + 1]) << 8
                | u32::from(b[3 * group + 2]);
            out[4 * group..4 * group + 4].copy_from_slice(&[
                sextet(n, 18),
                sextet(n, 12),
                sextet(n, 6),
                sextet(n, 0),
            ]);
        }
        let n = u32::from(b[30]) << 16 | u32::from(b[31]) << 8;
        out[40..].copy_from_slice(&[sextet(n, 18), sextet(n, 12), sextet(n, 6)]);
        out
    }

    /// The id a text form names; `None` for any other text, including one whose
    /// last character carries bits past the id's 256 (two texts never name one id).
    fn decode(text: &[u8]) -> Option<Self> {
        let text: &[u8; Self::LEN] = text.try_into().ok()?;
        let mut bytes = [0u8; Self::BYTES];
        let mut bad = 0u8;
        let mut digit = |c: u8| {
            let d = ID_DIGITS[usize::from(c)];
            bad |= d;
            u32::from(d)
        };
        for group in 0..10 {
            let c = &text[4 * group..4 * group + 4];
            let n = digit(c[0]) << 18 | digit(c[1]) << 12 | digit(c[2]) << 6 | digit(c[3]);
            bytes[3 * group..3 * group + 3].copy_from_slice(&n.to_be_bytes()[1..]);
        }
        let last = digit(text[42]);
        let n = digit(text[40]) << 18 | digit(text[41]) << 12 | last << 6;
        bytes[30..].copy_from_slice(&n.to_be_bytes()[1..3]);
        // A valid digit is under 64: 0xFF sets the high bits.
        (bad & 0xC0 == 0 && last & 3 == 0).then_some(TaskId(bytes))
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.encode();
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl FromStr for TaskId {
    type Err = InvalidTaskId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskId::decode(s.as_bytes()).ok_or(InvalidTaskId)
    }
}

impl Serialize for TaskId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
