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

/// The length of [`write_rfc3339`]'s text.
pub(super) const RFC3339_LEN: usize = "2026-01-01T00:00:00.000Z".len();

/// The latest instant [`Rfc3339`] writes as a date: 9999-12-31T23:59:59.999Z.
pub(super) const LAST_RFC3339_MS: u64 = 253_402_300_799_999;

/// Appends [`Rfc3339`]'s text for `t`, computed from the civil calendar without
/// `fmt` (the same text, tested against it).
pub(super) fn write_rfc3339(out: &mut Vec<u8>, t: Timestamp) {
    let ms = t.0.min(LAST_RFC3339_MS);
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, of_day) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a proleptic Gregorian date (Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    // Two digits at a time, from a table of "00" to "99".
    const PAIRS: [[u8; 2]; 100] = {
        let mut pairs = [[0u8; 2]; 100];
        let mut n = 0;
        while n < 100 {
            pairs[n] = [b'0' + (n / 10) as u8, b'0' + (n % 10) as u8];
            n += 1;
        }
        pairs
    };
    let pair = |n: u64| PAIRS[(n % 100) as usize];
    let [y0, y1] = pair(year / 100);
    let [y2, y3] = pair(year);
    let [mo0, mo1] = pair(month);
    let [d0, d1] = pair(day);
    let [h0, h1] = pair(of_day / 3_600);
    let [mi0, mi1] = pair(of_day / 60 % 60);
    let [s0, s1] = pair(of_day % 60);
    let [ms1, ms2] = pair(millis);
    let ms0 = b'0' + (millis / 100) as u8;
    out.extend_from_slice(&[
        y0, y1, y2, y3, b'-', mo0, mo1, b'-', d0, d1, b'T', h0, h1, b':', mi0, mi1, b':', s0, s1,
        b'.', ms0, ms1, ms2, b'Z',
    ]);
}
