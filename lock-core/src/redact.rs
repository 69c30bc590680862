//! Masking the secrets of a connection URL before it reaches a message.

/// `url` with its secrets masked, for errors, logs and `Debug` output: the password of the
/// user info (`user:***@host`) and the value of any `password=` query option
/// (`?password=***`). Everything else is kept, so the message still says which server.
///
/// ```
/// use lock_core::redact_url;
/// assert_eq!(redact_url("redis://u:secret@h:6379/0"), "redis://u:***@h:6379/0");
/// assert_eq!(
///     redact_url("redis+sentinel://:pw@s1,s2/locks"),
///     "redis+sentinel://:***@s1,s2/locks"
/// );
/// assert_eq!(
///     redact_url("postgres://u@h/db?password=pw&sslmode=require"),
///     "postgres://u@h/db?password=***&sslmode=require"
/// );
/// ```
///
/// A password with unescaped `@`, `/`, `?` or `#` in it is still masked whole: the user info
/// ends at the *last* `@`. The price: a URL without user info but with an `@` and a `:` in
/// its path or query shows less than it could (`h:***@…`), never more.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_query(url);
    };
    let Some(at) = rest.rfind('@') else {
        return format!("{scheme}://{}", redact_query(rest));
    };
    let userinfo = &rest[..at];
    let masked = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => userinfo.to_owned(),
    };
    format!("{scheme}://{masked}@{}", redact_query(&rest[at + 1..]))
}

/// `text` with the value of any `password=` query option masked.
fn redact_query(text: &str) -> String {
    let Some((base, query)) = text.split_once('?') else {
        return text.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", pairs.join("&"))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn secrets_never_survive() {
        for (url, shown) in [
            ("redis://u:secret@h/0", "redis://u:***@h/0"),
            (
                "rediss://:secret@h/0#insecure",
                "rediss://:***@h/0#insecure",
            ),
            ("redis://u:p@ss:secret@h/0", "redis://u:***@h/0"),
            ("postgres://u@h/d", "postgres://u@h/d"),
            (
                "postgres://h/d?PASSWORD=secret",
                "postgres://h/d?PASSWORD=***",
            ),
            ("file:///var/lock", "file:///var/lock"),
            ("redis://u:pa?ss=secret@h/0", "redis://u:***@h/0"),
            ("redis://u:pa/secret@h/0?x=1", "redis://u:***@h/0?x=1"),
            ("redis://u:pa#secret@h/0", "redis://u:***@h/0"),
            (
                "redis://u:secret@h/0?password=secret",
                "redis://u:***@h/0?password=***",
            ),
            ("no url at all", "no url at all"),
        ] {
            assert_eq!(redact_url(url), shown);
            assert!(!redact_url(url).contains("secret"));
        }
    }
}
