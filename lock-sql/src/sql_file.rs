//! Statements read from a `.sql` file that a reviewer reads top to bottom: each statement
//! follows a comment line that names it (`-- name: what it does`, more comment lines may
//! follow), and ends with the first line that ends with `;`. And the one rule for the
//! names a user gives to the tables and schemas those statements use.

/// The statement named `name` in `file`: its code lines (comment and empty lines left
/// out), without the closing `;`. `None` when no line starts with `-- name:` or no
/// statement follows it.
///
/// ```
/// let file = "-- make: a table.\nCREATE TABLE t (a int);\n\n-- read: every row.\n-- note: a second comment line\nSELECT a\n  FROM t;\n";
/// assert_eq!(lock_sql::sql_file::statement(file, "make").as_deref(), Some("CREATE TABLE t (a int)"));
/// assert_eq!(lock_sql::sql_file::statement(file, "read").as_deref(), Some("SELECT a\n  FROM t"));
/// assert_eq!(lock_sql::sql_file::statement(file, "drop"), None);
/// ```
pub fn statement(file: &str, name: &str) -> Option<String> {
    let marker = format!("-- {name}:");
    let mut lines = file.lines().skip_while(|l| !l.starts_with(&marker));
    lines.next()?;
    let mut code = Vec::new();
    for line in lines {
        if line.trim_start().starts_with("--") || line.trim().is_empty() {
            continue;
        }
        let end = line.trim_end();
        if let Some(last) = end.strip_suffix(';') {
            code.push(last);
            return Some(code.join("\n"));
        }
        code.push(line);
    }
    None
}

/// Whether `name` may name a table or a schema: a plain lowercase identifier,
/// `[a-z_][a-z0-9_]{0,47}`, which needs no quoting rules of any server to be safe inside a
/// statement (it is still quoted there).
///
/// ```
/// assert!(lock_sql::sql_file::plain_identifier("distlock_locks"));
/// assert!(!lock_sql::sql_file::plain_identifier("Locks"));
/// assert!(!lock_sql::sql_file::plain_identifier("locks; DROP TABLE x"));
/// ```
pub fn plain_identifier(name: &str) -> bool {
    (1..=48).contains(&name.len())
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}
