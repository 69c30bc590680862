//! Durations in human form: `250ms`, `30s`, `5m`, `1h`, `2d`, or plain seconds (`30`).

use std::time::Duration;

/// The longest deadline a backend accepts for one call: an hour. A deadline bounds how long
/// a caller waits for one obtain, prolong or release, so past a few seconds it only delays
/// the answer; and a duration too large to add to a clock reading must never reach one.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(3600);

/// Checks a backend's deadline for one call: longer than zero and at most
/// [`MAX_CALL_TIMEOUT`]. The error is a message for the backend's configuration error.
///
/// ```
/// use std::time::Duration;
/// assert!(lock_core::backend::check_call_timeout(Duration::from_secs(2)).is_ok());
/// assert!(lock_core::backend::check_call_timeout(Duration::ZERO).is_err());
/// assert!(lock_core::backend::check_call_timeout(Duration::MAX).is_err());
/// ```
///
/// # Errors
/// What is wrong, for the user to read.
pub fn check_call_timeout(timeout: Duration) -> Result<Duration, String> {
    if timeout.is_zero() {
        Err("the deadline of a call must be longer than zero".to_owned())
    } else if timeout > MAX_CALL_TIMEOUT {
        Err(format!(
            "the deadline of a call must be at most {}s, got {timeout:?}",
            MAX_CALL_TIMEOUT.as_secs()
        ))
    } else {
        Ok(timeout)
    }
}

/// Parses `text` as a duration; `None` if it is not one.
///
/// ```
/// use std::time::Duration;
/// use lock_core::parse_duration;
/// assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
/// assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
/// assert_eq!(parse_duration("soon"), None);
/// ```
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let part = match &rest[..unit] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60)?),
            "h" => Duration::from_secs(n.checked_mul(3600)?),
            "d" => Duration::from_secs(n.checked_mul(86_400)?),
            _ => return None,
        };
        total = total.checked_add(part)?;
        rest = &rest[unit..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        assert_eq!(parse_duration("45"), Some(Duration::from_secs(45)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        for bad in ["", "s", "10x", "-1s", "1.5s", "99999999999999999999d"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
