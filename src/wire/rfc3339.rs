//! Timestamps as the wire writes them: RFC 3339 in UTC with milliseconds, the
//! `createdAt` and `lastUpdatedAt` of both eras.

/// The length of [`write_rfc3339`]'s text.
pub(crate) const RFC3339_LEN: usize = "2026-01-01T00:00:00.000Z".len();

/// The latest instant written as a date: 9999-12-31T23:59:59.999Z.
pub(crate) const LAST_RFC3339_MS: u64 = 253_402_300_799_999;

/// Appends the RFC 3339 text (UTC, milliseconds) of `ms` milliseconds since the
/// Unix epoch, computed from the civil calendar without `fmt`; instants past
/// [`LAST_RFC3339_MS`] are written as it.
pub(crate) fn write_rfc3339(out: &mut Vec<u8>, ms: u64) {
    let ms = ms.min(LAST_RFC3339_MS);
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
