//! Byte sizes as people write them in flags and configuration: `4096`, `64KiB`,
//! `256MiB`, `64GiB` (powers of 1024; `K`, `M`, `G`, `T` are accepted as short forms).

/// Parses a byte size.
///
/// # Errors
/// A message naming the problem: not a number, an unknown unit, or an overflow.
pub fn parse_byte_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("'{s}' is not a size"))?;
    if unit.starts_with(['.', ',']) {
        return Err(format!(
            "'{s}': sizes are whole numbers of a unit (e.g. 1536MiB, not 1.5GiB)"
        ));
    }
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        other => {
            return Err(format!(
                "unknown size unit '{other}' (use KiB, MiB, GiB, TiB)"
            ));
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_byte_size("4096"), Ok(4096));
        assert_eq!(parse_byte_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_byte_size(" 5GiB "), Ok(5 << 30));
        assert_eq!(parse_byte_size("2T"), Ok(2 << 40));
        assert!(parse_byte_size("1XB").is_err());
        assert!(parse_byte_size("GiB").is_err());
        assert!(matches!(parse_byte_size("1.5GiB"), Err(e) if e.contains("1536MiB")));
        assert!(parse_byte_size("99999999999TiB").is_err());
    }
}
