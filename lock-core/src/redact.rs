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
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match base.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => {
                    let userinfo = &rest[..at];
                    let masked = match userinfo.split_once(':') {
                        Some((user, _)) => format!("{user}:***"),
                        None => userinfo.to_owned(),
                    };
                    format!("{scheme}://{masked}{}", &rest[at..])
                }
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
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
            ("no url at all", "no url at all"),
        ] {
            assert_eq!(redact_url(url), shown);
            assert!(!redact_url(url).contains("secret"));
        }
    }
}
