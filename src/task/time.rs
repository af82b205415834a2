//! [`Timestamp`] and its RFC 3339 text, written by hand on the hot path.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A point in time, in milliseconds since the Unix epoch.
///
/// Stores receive the current time as an argument so that tests control it.
///
/// ```
/// use mcp_tasks::store::Timestamp;
///
/// let created = Timestamp::from_millis(1_785_578_400_000);
/// let expires = created.plus_ms(3_600_000);
/// assert!(expires > created);
/// assert_eq!(expires.to_rfc3339(), "2026-08-01T11:00:00.000Z");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The time `ms` milliseconds after the Unix epoch.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// assert_eq!(Timestamp::from_millis(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
    /// ```
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch (what the SQL store keeps in `expires_at`).
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// assert_eq!(Timestamp::from_millis(1_234).as_millis(), 1_234);
    /// ```
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// This time minus `ms` milliseconds, saturating at the epoch.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// let now = Timestamp::from_millis(10_000);
    /// assert_eq!(now.minus_ms(4_000), Timestamp::from_millis(6_000));
    /// assert_eq!(now.minus_ms(u64::MAX), Timestamp::from_millis(0));
    /// ```
    pub fn minus_ms(self, ms: u64) -> Self {
        Timestamp(self.0.saturating_sub(ms))
    }

    /// The current wall-clock time.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// assert!(Timestamp::now() > Timestamp::from_millis(1_700_000_000_000)); // after 2023
    /// ```
    pub fn now() -> Self {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Timestamp(ms)
    }

    /// This time plus `ms` milliseconds, saturating.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// assert_eq!(Timestamp::from_millis(1).plus_ms(2), Timestamp::from_millis(3));
    /// assert_eq!(Timestamp::from_millis(1).plus_ms(u64::MAX).as_millis(), u64::MAX);
    /// ```
    pub fn plus_ms(self, ms: u64) -> Self {
        Timestamp(self.0.saturating_add(ms))
    }

    /// ISO 8601 / RFC 3339 in UTC with millisecond precision, e.g.
    /// `2026-08-01T10:00:00.000Z`: the form of `createdAt` and `lastUpdatedAt`.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// let t = Timestamp::from_millis(1_785_578_400_123);
    /// assert_eq!(t.to_rfc3339(), "2026-08-01T10:00:00.123Z");
    /// ```
    pub fn to_rfc3339(self) -> String {
        Rfc3339(self).to_string()
    }
}

/// A [`Timestamp`] displayed as RFC 3339, written without an intermediate string.
#[derive(Clone, Copy)]
pub(crate) struct Rfc3339(pub(crate) Timestamp);

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.0 % 1000;
        match time::OffsetDateTime::from_unix_timestamp((self.0.0 / 1000) as i64) {
            Ok(t) => write!(
                f,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{millis:03}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
            ),
            Err(_) => f.write_str("9999-12-31T23:59:59.999Z"),
        }
    }
}

#[cfg(test)]
pub(super) use crate::wire::LAST_RFC3339_MS;
pub(super) use crate::wire::RFC3339_LEN;

/// Appends [`Rfc3339`]'s text for `t` (the wire's one writer of it).
pub(super) fn write_rfc3339(out: &mut Vec<u8>, t: Timestamp) {
    crate::wire::write_rfc3339(out, t.0);
}
