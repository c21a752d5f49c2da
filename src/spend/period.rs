//! UTC days and months: budgets reset at 00:00 UTC each day and on the
//! first of each month (no time-zone data, no date crate).

use std::time::{SystemTime, UNIX_EPOCH};

/// A moment as seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The civil date of a day number (days since 1970-01-01), by Howard
/// Hinnant's `civil_from_days`.
pub fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The day number of a civil date (`days_from_civil`).
pub fn days(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The budget periods `t` falls in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Periods {
    /// `2026-12-02`
    pub day: String,
    /// `2026-12`
    pub month: String,
    /// Start of the next UTC day and month (epoch seconds).
    pub day_ends: u64,
    pub month_ends: u64,
}

impl Periods {
    pub fn at(t: u64) -> Self {
        let today = (t / 86_400) as i64;
        let (y, m, d) = civil(today);
        let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        Periods {
            day: format!("{y:04}-{m:02}-{d:02}"),
            month: format!("{y:04}-{m:02}"),
            day_ends: ((today + 1) * 86_400) as u64,
            month_ends: (days(ny, nm, 1) * 86_400) as u64,
        }
    }
}

/// RFC 3339 in UTC: `2026-12-03T00:00:00Z`.
pub fn rfc3339(t: u64) -> String {
    let (y, m, d) = civil((t / 86_400) as i64);
    let s = t % 86_400;
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_months_in_utc() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(days(2000, 2, 29), 11_016);
        assert_eq!(civil(11_016), (2000, 2, 29));
        for n in [-1000, 0, 59, 60, 10_000, 20_454, 30_000] {
            let (y, m, d) = civil(n);
            assert_eq!(days(y, m, d), n);
        }
        // 2026-12-31T23:59:59Z: the day and the month end a second later.
        let t = days(2026, 12, 31) as u64 * 86_400 + 86_399;
        let p = Periods::at(t);
        assert_eq!((p.day.as_str(), p.month.as_str()), ("2026-12-31", "2026-12"));
        assert_eq!((p.day_ends, p.month_ends), (t + 1, t + 1));
        assert_eq!(rfc3339(p.month_ends), "2027-01-01T00:00:00Z");
        let feb = Periods::at(days(2028, 2, 10) as u64 * 86_400 + 5);
        assert_eq!(rfc3339(feb.month_ends), "2028-03-01T00:00:00Z");
        assert_eq!(rfc3339(feb.day_ends), "2028-02-11T00:00:00Z");
        assert_eq!(rfc3339(3_723), "1970-01-01T01:02:03Z");
    }
}
