//! Limits on hostile input that a person can change through the
//! environment (`MLLM_MAX_SCRIPT_STEPS`, `MLLM_MAX_IMAGE_PIXELS`, ...):
//! parsing their values, shared by the crates that enforce them (the
//! interpreter, the converter's template and image readers).

/// The value of the limit variable `name`: `None` when unset; an error
/// naming the variable when it is not a positive number.
pub fn read(name: &str) -> Result<Option<u64>, String> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(_) => Err(format!("{name} is not valid UTF-8")),
        Ok(s) => parse_size(&s).filter(|&v| v > 0).map(Some).ok_or_else(|| {
            format!("{name}={s} is not a positive number (a count, or a size such as 512M or 4G)")
        }),
    }
}

/// `read`, with `default` when unset.
pub fn read_or(name: &str, default: u64) -> Result<u64, String> {
    Ok(read(name)?.unwrap_or(default))
}

/// `123`, `64K`, `512M`, `8G`, `1T` (binary multiples; a trailing `B` or
/// `iB` is allowed).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s
        .strip_suffix("iB")
        .or_else(|| s.strip_suffix('B'))
        .unwrap_or(s);
    let (num, shift) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 10),
        (i, 'm' | 'M') => (&s[..i], 20),
        (i, 'g' | 'G') => (&s[..i], 30),
        (i, 't' | 'T') => (&s[..i], 40),
        _ => (s, 0),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size(" 8g "), Some(8 << 30));
        assert_eq!(parse_size("2TB"), Some(2 << 40));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999T"), None);
    }
}
