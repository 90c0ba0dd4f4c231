//! The instant `strftime_now(fmt)` reports, and a C-locale `strftime` for it.
//!
//! No timezone database: times are naive (what the caller passes, or UTC now). The directives
//! are Python's in the C locale; an unknown directive is kept as written, as glibc does.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// A naive calendar date and time of day (proleptic Gregorian, no timezone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DateTime {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

impl DateTime {
    /// The current time in UTC.
    pub fn now_utc() -> DateTime {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        DateTime::from_unix(secs)
    }

    /// The UTC calendar time of a Unix timestamp.
    pub fn from_unix(secs: i64) -> DateTime {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        DateTime {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
        }
    }

    /// Parses ISO 8601 `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS[.fff]]` (a space may replace `T`;
    /// a trailing `Z` or `±HH:MM` offset is accepted and ignored: the time is taken as written).
    pub fn parse_iso(text: &str) -> Option<DateTime> {
        let text = text.trim();
        let (date, time) = match text.find(['T', 't', ' ']) {
            Some(i) => (&text[..i], Some(&text[i + 1..])),
            None => (text, None),
        };
        let mut d = date.splitn(3, '-');
        let year: i32 = num(d.next()?, 4)?;
        let month: u32 = num(d.next()?, 2)?;
        let day: u32 = num(d.next()?, 2)?;
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        let (mut hour, mut minute, mut second) = (0, 0, 0);
        if let Some(time) = time {
            let end = time.find(['Z', 'z', '+', '-']).unwrap_or(time.len());
            let time = &time[..end];
            let time = time.split_once('.').map_or(time, |(hms, _frac)| hms);
            let mut t = time.split(':');
            hour = num(t.next()?, 2)?;
            minute = num(t.next()?, 2)?;
            second = match t.next() {
                Some(s) => num(s, 2)?,
                None => 0,
            };
            if t.next().is_some() || hour > 23 || minute > 59 || second > 59 {
                return None;
            }
        }
        Some(DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
        })
    }

    /// Day of the week, 0 = Monday.
    fn weekday(&self) -> u32 {
        // 1970-01-01 was a Thursday (3).
        (days_from_civil(self.year, self.month, self.day) + 3).rem_euclid(7) as u32
    }

    /// Day of the year, 1-based.
    fn ordinal(&self) -> u32 {
        (1..self.month)
            .map(|m| days_in_month(self.year, m))
            .sum::<u32>()
            + self.day
    }

    /// Formats like Python's `datetime.strftime` in the C locale.
    pub fn strftime(&self, fmt: &str) -> String {
        let mut out = String::new();
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let Some(d) = chars.next() else {
                out.push('%');
                break;
            };
            let hour12 = match self.hour % 12 {
                0 => 12,
                h => h,
            };
            let month_name = MONTHS[(self.month - 1) as usize];
            let weekday_name = WEEKDAYS[self.weekday() as usize];
            // `write!` to a String cannot fail.
            let _ = match d {
                'd' => write!(out, "{:02}", self.day),
                'e' => write!(out, "{:2}", self.day),
                'm' => write!(out, "{:02}", self.month),
                'Y' => write!(out, "{}", self.year),
                'y' => write!(out, "{:02}", self.year.rem_euclid(100)),
                'C' => write!(out, "{:02}", self.year.div_euclid(100)),
                'H' => write!(out, "{:02}", self.hour),
                'I' => write!(out, "{:02}", hour12),
                'M' => write!(out, "{:02}", self.minute),
                'S' => write!(out, "{:02}", self.second),
                'p' => write!(out, "{}", if self.hour < 12 { "AM" } else { "PM" }),
                'B' => write!(out, "{month_name}"),
                'b' | 'h' => write!(out, "{}", &month_name[..3]),
                'A' => write!(out, "{weekday_name}"),
                'a' => write!(out, "{}", &weekday_name[..3]),
                'j' => write!(out, "{:03}", self.ordinal()),
                'u' => write!(out, "{}", self.weekday() + 1),
                'w' => write!(out, "{}", (self.weekday() + 1) % 7),
                'F' => write!(out, "{}-{:02}-{:02}", self.year, self.month, self.day),
                'T' => write!(
                    out,
                    "{:02}:{:02}:{:02}",
                    self.hour, self.minute, self.second
                ),
                'R' => write!(out, "{:02}:{:02}", self.hour, self.minute),
                'D' => write!(
                    out,
                    "{:02}/{:02}/{:02}",
                    self.month,
                    self.day,
                    self.year.rem_euclid(100)
                ),
                'c' => write!(
                    out,
                    "{} {} {:2} {:02}:{:02}:{:02} {}",
                    &weekday_name[..3],
                    &month_name[..3],
                    self.day,
                    self.hour,
                    self.minute,
                    self.second,
                    self.year
                ),
                'x' => write!(
                    out,
                    "{:02}/{:02}/{:02}",
                    self.month,
                    self.day,
                    self.year.rem_euclid(100)
                ),
                'X' => write!(
                    out,
                    "{:02}:{:02}:{:02}",
                    self.hour, self.minute, self.second
                ),
                'f' => write!(out, "000000"),
                'z' | 'Z' => Ok(()),
                'n' => out.write_char('\n'),
                't' => out.write_char('\t'),
                '%' => write!(out, "%"),
                other => write!(out, "%{other}"),
            };
        }
        out
    }
}

/// Parses exactly-`width`-or-fewer ASCII digits (at least one).
fn num<T: std::str::FromStr>(s: &str, max_width: usize) -> Option<T> {
    if s.is_empty() || s.len() > max_width || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn is_leap(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(year: i32, month: u32, day: u32) -> i64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day count since 1970-01-01 (inverse of `days_from_civil`).
fn civil_from_days(days: i64) -> (i32, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year as i32, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_like_python() {
        let t = DateTime::parse_iso("2025-01-01T00:00:00").unwrap();
        assert_eq!(t.strftime("%d %b %Y"), "01 Jan 2025");
        assert_eq!(t.strftime("%B %d, %Y"), "January 01, 2025");
        assert_eq!(
            t.strftime("%Y-%m-%d %A %a %j %I%p %%"),
            "2025-01-01 Wednesday Wed 001 12AM %"
        );
        let t = DateTime::parse_iso("2024-12-31 13:05:09").unwrap();
        assert_eq!(t.strftime("%H:%M:%S %I %p %j %y"), "13:05:09 01 PM 366 24");
        assert!(DateTime::parse_iso("2025-02-30").is_none());
        assert!(DateTime::parse_iso("yesterday").is_none());
    }

    #[test]
    fn unix_round_trip() {
        assert_eq!(
            DateTime::from_unix(1_735_689_600),
            DateTime::parse_iso("2025-01-01T00:00:00").unwrap()
        );
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(days_from_civil(2000, 2, 29)), (2000, 2, 29));
    }
}
