//! `current_time`: the current date and time, in UTC or at a fixed UTC
//! offset (no time-zone database is bundled).

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::tools::{Tool, ToolError, ToolOutput, ToolSpec};

pub struct CurrentTime;

impl Tool for CurrentTime {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "current_time".into(),
            description: "The current date and time (ISO 8601). Optionally at a UTC offset such as +02:00.".into(),
            parameters: json!({"type": "object", "properties": {
                "utc_offset": {"type": "string", "pattern": "^(Z|UTC|[+-][0-9]{2}:?[0-9]{2})$",
                               "description": "UTC offset like +05:30 or -08:00 (default UTC)"}},
                "additionalProperties": false}),
        }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_err(|e| ToolError::Failed(e.to_string()))?;
            let offset = match args.get("utc_offset").and_then(Value::as_str) {
                Some(s) => parse_offset(s).ok_or_else(|| ToolError::Failed(format!("bad utc_offset {s:?}")))?,
                None => 0,
            };
            let secs = now.as_secs() as i64;
            let out = json!({"datetime": format_time(secs, offset), "unix": secs});
            Ok(ToolOutput::text(out.to_string()))
        })
    }
}

/// Minutes east of UTC.
fn parse_offset(s: &str) -> Option<i64> {
    if s == "Z" || s == "UTC" {
        return Some(0);
    }
    let sign = match s.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits: String = s[1..].chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 {
        return None;
    }
    let h: i64 = digits[..2].parse().ok()?;
    let m: i64 = digits[2..].parse().ok()?;
    (h <= 14 && m < 60).then_some(sign * (h * 60 + m))
}

/// RFC 3339 for Unix seconds at an offset in minutes.
fn format_time(unix: i64, offset_min: i64) -> String {
    let t = unix + offset_min * 60;
    let (days, rem) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let (y, mo, d) = crate::spend::period::civil(days);
    let zone = if offset_min == 0 {
        "Z".to_string()
    } else {
        let a = offset_min.abs();
        format!("{}{:02}:{:02}", if offset_min < 0 { '-' } else { '+' }, a / 60, a % 60)
    };
    format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}{zone}", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_dates_and_offsets() {
        assert_eq!(format_time(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(format_time(1_709_210_096, 0), "2024-02-29T12:34:56Z");
        assert_eq!(format_time(1_709_210_096, 330), "2024-02-29T18:04:56+05:30");
        assert_eq!(format_time(1_709_210_096, -780), "2024-02-28T23:34:56-13:00");
        assert_eq!(parse_offset("+0530"), Some(330));
        assert_eq!(parse_offset("-08:00"), Some(-480));
        assert_eq!(parse_offset("8"), None);
    }
}
