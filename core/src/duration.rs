//! Durations as people write them in flags: `500ms`, `5s`, `2m`, `1h` (a bare number
//! is seconds).

use std::time::Duration;

/// Parses a duration.
///
/// # Errors
/// A message naming the problem: not a number, an unknown unit, or an overflow.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (500ms, 5s, 2m, 1h)"))?;
    let millis_per = match unit.trim() {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        other => {
            return Err(format!("unknown duration unit '{other}' (use ms, s, m, h)"));
        }
    };
    n.checked_mul(millis_per)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("'{s}' is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration(" 5s "), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("1d").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("99999999999999999h").is_err());
    }
}
