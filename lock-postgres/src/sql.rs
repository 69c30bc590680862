//! The SQL the backend sends: the schema file with its names filled in, and one statement
//! per operation, in either of two forms ([`Statements`]):
//!
//! - **prepared** (the default): `SELECT … FROM fn($1, …, $10)` on the extended protocol,
//!   parsed and planned once per connection (sqlx's statement cache), the values bound as
//!   parameters. One round trip. The function itself pins what the call needs of the
//!   session's settings (see `schema.sql`), and answers `settings` when it cannot (an
//!   isolation level other than READ COMMITTED, a shorter `statement_timeout`): the call
//!   then goes again in the simple form, which pins them first.
//! - **simple**: the statement over the simple query protocol with its values written into
//!   the text, after a preamble ([`Session::preamble`]). One message, one round trip, no
//!   prepared statement kept on the server, so it works through any transaction-pooling
//!   proxy (PgBouncer in transaction mode before 1.21, which cannot carry prepared
//!   statements). Values are never spliced in raw: strings travel as hex
//!   (`pg_catalog.convert_from(pg_catalog.decode('…', 'hex'), 'UTF8')`, qualified so that
//!   no search_path can put other functions there), which no setting of the server can
//!   reinterpret, and numbers as decimal digits.
//!
//! Whatever logs statements (sqlx at DEBUG, its slow statement WARN, the server's
//! `log_statement` with its bound parameters) may see the values: so the owner token never
//! goes out, only its SHA-256 (`Token::digest`), which the table stores instead.

use std::fmt::Write;
use std::time::Duration;

use lock_core::backend::rules::columns::Columns;
use lock_core::backend::rules::Wake;
use sha2::{Digest, Sha256};

const SCHEMA: &str = include_str!("sql/schema.sql");

// The functions' names after the table's, with the version each last changed in (see the
// top of schema.sql): a backend never runs another version's body.
/// Every operation.
const OP_FN: &str = "op_v7";
/// Deletes rows nobody needs any more.
const SWEEP_FN: &str = "sweep_v3";
/// Raises when a write touched no row.
const CHECK_FN: &str = "check_v2";
/// The live entries of a row's `waiting`.
const WAITS_FN: &str = "waits_v1";

/// The names of one lock table, already checked to be plain lowercase identifiers.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub(crate) schema: String,
    pub(crate) table: String,
    /// `"schema"."fn"`, the function every operation calls.
    function: String,
    /// `"schema"."waits fn"`, the live entries of a row's `waiting`.
    waits: String,
    /// The prepared form of every operation (see [`Statements`]).
    pub(crate) prepared: String,
    /// The prepared form of a batch of prolongs ([`Prolongs`]).
    pub(crate) prepared_prolongs: String,
    /// `'schema.table '`: a key's advisory lock id is the hash of this and the key.
    lock_prefix: String,
    /// The NOTIFY channel of release notifications (a short digest of the table's name):
    /// each wakes one waiter of its key per listening process.
    pub(crate) channel: String,
    /// The NOTIFY channel of changes that may let every waiter of a key in (a downgrade;
    /// the last share leaving beside a waiting writer's marker): each wakes all of them.
    /// A channel of its own, rather than a mark in the payload, so that a listener of an
    /// older version, which listens to [`Names::channel`] only, reads no payload wrong.
    pub(crate) channel_all: String,
}

impl Names {
    /// `None` unless both names match `[a-z_][a-z0-9_]{0,47}`.
    pub(crate) fn new(schema: &str, table: &str) -> Option<Self> {
        let ok = lock_sql::sql_file::plain_identifier;
        if !ok(schema) || !ok(table) {
            return None;
        }
        let digest = Sha256::digest(format!("{schema}.{table}").as_bytes());
        let mut channel = String::from("lock_released_");
        for b in &digest[..8] {
            let _ = write!(channel, "{b:02x}");
        }
        let function = format!("\"{schema}\".\"{table}_{OP_FN}\"");
        let waits = format!("\"{schema}\".\"{table}_{WAITS_FN}\"");
        Some(Names {
            prepared_prolongs: prolongs_statement(
                &function,
                ["$1", "$2", "$3", "$4", "$5", "$6", "$7"],
            ),
            prepared: format!(
                "SELECT o_outcome, o_ms, o_holder, o_fencing, o_holds \
                 FROM {function}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ),
            function,
            waits,
            lock_prefix: format!("{schema}.{table} "),
            schema: schema.to_owned(),
            table: table.to_owned(),
            channel_all: format!("{channel}_all"),
            channel,
        })
    }

    /// The whole schema script, for `migrate()`, in one transaction under two advisory
    /// locks so that concurrent migrations take turns: the schema's (migrations of other
    /// tables in it wait too: `CREATE SCHEMA IF NOT EXISTS` run twice at once fails the
    /// second with a duplicate key in `pg_namespace`), then the table's (the one earlier
    /// versions take alone, so that a rolling deploy's two versions of one table still
    /// take turns; always in this order, so two migrations never wait for each other).
    pub(crate) fn migration(&self) -> String {
        let body = SCHEMA
            .replace("{schema}", &format!("\"{}\"", self.schema))
            .replace("{table}", &format!("\"{}\"", self.table))
            .replace("{fn}", &format!("\"{}_{OP_FN}\"", self.table))
            .replace("{sweep}", &format!("\"{}_{SWEEP_FN}\"", self.table))
            .replace("{check}", &format!("\"{}_{CHECK_FN}\"", self.table))
            .replace("{waits}", &format!("\"{}_{WAITS_FN}\"", self.table))
            .replace("{channel_all}", &format!("'{}'", self.channel_all))
            .replace("{channel}", &format!("'{}'", self.channel))
            .replace("{lock_prefix}", &format!("'{}'", self.lock_prefix));
        format!(
            "BEGIN;\nSELECT pg_advisory_xact_lock({});\nSELECT pg_advisory_xact_lock({});\n{body}\nCOMMIT;",
            advisory_id(&format!("migrate schema {}", self.schema)),
            advisory_id(&format!("migrate {}.{}", self.schema, self.table))
        )
    }

    /// One page of a listing: up to `limit` keys under `prefix` past `after`, in byte order
    /// (`COLLATE "C"`, whatever the column's collation, so that pages follow the same order
    /// on every backend); rows that keep only a fencing token (`free`, no writer's marker)
    /// and the library's own names (below `FIRST_KEY`) left out. A plain read: no transaction, no lock.
    pub(crate) fn list_keys(&self, prefix: &str, after: Option<&str>, limit: usize) -> String {
        let mut sql = format!(
            "SELECT key FROM {schema}.{table} WHERE (state <> 'free' OR writer IS NOT NULL) \
             AND key COLLATE \"C\" >= {lower} COLLATE \"C\" \
             AND key COLLATE \"C\" >= {first} COLLATE \"C\"",
            schema = quoted(&self.schema),
            table = quoted(&self.table),
            lower = text(prefix),
            first = text(lock_core::backend::listing::FIRST_KEY),
        );
        if let Some(upper) = lock_core::backend::listing::prefix_end(prefix.as_bytes()) {
            // The end may be no UTF-8 (a last byte raised past a sequence's range): as
            // bytes, compared to the key's bytes, which "C" orders the same way.
            let mut hex = String::with_capacity(upper.len() * 2);
            for b in &upper {
                let _ = write!(hex, "{b:02x}");
            }
            let _ = write!(
                sql,
                " AND pg_catalog.convert_to(key, 'UTF8') < pg_catalog.decode('{hex}', 'hex')"
            );
        }
        if let Some(after) = after {
            let _ = write!(
                sql,
                " AND key COLLATE \"C\" > {} COLLATE \"C\"",
                text(after)
            );
        }
        let _ = write!(sql, " ORDER BY key COLLATE \"C\" LIMIT {limit}");
        sql
    }

    /// The columns and types a lock table has, to check an existing one against.
    pub(crate) fn shape_query(&self) -> String {
        format!(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = {} AND table_name = {} ORDER BY ordinal_position",
            text(&self.schema),
            text(&self.table)
        )
    }

    /// The `(signature)` of the operations' function, for `to_regprocedure`.
    pub(crate) fn function_signature(&self) -> String {
        format!(
            "{}(text, text, bigint, text, bigint, bigint, text, bigint, bigint, boolean)",
            self.function
        )
    }

    /// One operation in the simple form: `session`'s preamble, then
    /// `SELECT * FROM fn(op, key, lock, token, ttl, grace, holder, delay, deadline, durable)`
    /// with every value in the text.
    pub(crate) fn call(&self, session: &Session, op: &str, key: &str, args: &Args<'_>) -> String {
        format!(
            "{}SELECT o_outcome, o_ms, o_holder, o_fencing, o_holds FROM {}({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
            session.preamble,
            self.function,
            text(op),
            text(key),
            self.lock_id(key),
            args.token.map_or_else(|| "NULL".to_owned(), text),
            args.ttl_ms,
            args.grace_ms,
            args.holder.map_or_else(|| "NULL".to_owned(), text),
            args.delay_ms,
            session.deadline_ms,
            session.durable,
        )
    }

    /// A batch of prolongs in the simple form: `session`'s preamble, then the batch
    /// statement with every value in the text.
    pub(crate) fn prolongs(&self, session: &Session, batch: &Prolongs) -> String {
        let list = |items: Vec<String>, ty: &str| format!("ARRAY[{}]::{ty}[]", items.join(", "));
        let numbers = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>();
        let texts = |v: &[String]| v.iter().map(|t| text(t)).collect::<Vec<_>>();
        let statement = prolongs_statement(
            &self.function,
            [
                &list(texts(&batch.keys), "pg_catalog.text"),
                &list(numbers(&batch.locks), "pg_catalog.int8"),
                &list(texts(&batch.tokens), "pg_catalog.text"),
                &list(numbers(&batch.ttls), "pg_catalog.int8"),
                &list(numbers(&batch.graces), "pg_catalog.int8"),
                &session.deadline_ms.to_string(),
                &session.durable.to_string(),
            ],
        );
        format!("{}{statement}", session.preamble)
    }

    /// The first message of a decision in the client (`storage.rs`): opens the transaction,
    /// pins the session as every call does (and the search_path, as the functions do),
    /// takes the key's advisory lock, then reads the server's clock and the key's row in
    /// one row (its columns NULL when the key has none). Times in µs since the epoch.
    pub(crate) fn shared_read(&self, session: &Session, key: &str) -> String {
        format!(
            "BEGIN; {preamble}SET LOCAL search_path = pg_catalog, pg_temp;              SELECT pg_advisory_xact_lock({lock});              SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8, t.state, t.token,              t.holder, t.fencing, t.holds, (extract(epoch FROM t.expires_at) * 1000000)::int8,              (extract(epoch FROM t.forget_at) * 1000000)::int8, t.shares::text, t.writer::text              FROM (SELECT 1) AS one LEFT JOIN {schema}.{table} t ON t.key = {key}",
            preamble = session.preamble,
            lock = self.lock_id(key),
            schema = quoted(&self.schema),
            table = quoted(&self.table),
            key = text(key),
        )
    }

    /// The last message of a decision in the client that writes: the key's row (its
    /// `waiting` and `waiters` kept), the release notification the decision's `wake` asks
    /// for when some process waits, and the commit.
    pub(crate) fn shared_write(&self, key: &str, row: &Columns, wake: Wake) -> String {
        let opt_text = |v: &Option<String>| v.as_deref().map_or_else(|| "NULL".to_owned(), text);
        let opt_num = |v: Option<u64>| v.map_or_else(|| "NULL".to_owned(), |n| n.to_string());
        let at = |us: u64| format!("('epoch'::timestamptz + {us} * interval '1 microsecond')");
        let (schema, table) = (quoted(&self.schema), quoted(&self.table));
        let mut sql = format!(
            "INSERT INTO {schema}.{table} AS t (key, state, token, holder, fencing, holds,              expires_at, forget_at, shares, writer) VALUES ({key}, {state}, {token}, {holder},              {fencing}, {holds}, {expires}, {forget}, {shares}::jsonb, {writer}::jsonb)              ON CONFLICT (key) DO UPDATE SET state = EXCLUDED.state, token = EXCLUDED.token,              holder = EXCLUDED.holder, fencing = EXCLUDED.fencing, holds = EXCLUDED.holds,              expires_at = EXCLUDED.expires_at, forget_at = EXCLUDED.forget_at,              shares = EXCLUDED.shares, writer = EXCLUDED.writer; ",
            key = text(key),
            state = text(row.state),
            token = opt_text(&row.token),
            holder = opt_text(&row.holder),
            fencing = row.fencing,
            holds = opt_num(row.holds.map(u64::from)),
            expires = at(row.expires_us),
            forget = at(row.forget_us),
            shares = opt_text(&row.shares),
            writer = opt_text(&row.writer),
        );
        let channel = match wake {
            Wake::Nobody => None,
            Wake::One => Some(&self.channel),
            Wake::All => Some(&self.channel_all),
        };
        if let Some(channel) = channel {
            let _ = write!(
                sql,
                "SELECT pg_notify({channel}, t.key) FROM {schema}.{table} t WHERE t.key = {key}                  AND (t.waiters > 0 OR {waits}(t.waiting, clock_timestamp()) <> '{{}}'::jsonb); ",
                channel = text(channel),
                key = text(key),
                waits = self.waits,
            );
        }
        sql.push_str("COMMIT");
        sql
    }

    /// The advisory lock id of `key` in this table.
    pub(crate) fn lock_id(&self, key: &str) -> i64 {
        advisory_id(&format!("{}{key}", self.lock_prefix))
    }
}

/// Many prolongs in one statement, one transaction: the function once per row, in the
/// order of the arrays (a function scan feeds the lateral call row by row), which the
/// client sorts by advisory lock id, so that two batches that share keys take their
/// locks in the same order and never deadlock. One answer per row, in that order.
///
/// Each row gets what is left of the batch's deadline, counted from the statement's start
/// (`statement_timestamp()`), as its own deadline: a batch queued behind other sessions
/// key after key ends on the server by the deadline too, as one call does, rather than
/// wait the whole deadline once per key after its client has given up (a prepared
/// statement runs under the session's `statement_timeout`, often none). Every function,
/// operator and type is named in `pg_catalog`: no search_path can replace them.
fn prolongs_statement(function: &str, args: [&str; 7]) -> String {
    let [keys, locks, tokens, ttls, graces, deadline, durable] = args;
    let left = format!(
        "GREATEST(1, pg_catalog.float8mi({deadline}::pg_catalog.float8, \
         pg_catalog.float8mul(1000, pg_catalog.date_part('epoch', pg_catalog.timestamptz_mi(\
         pg_catalog.clock_timestamp(), pg_catalog.statement_timestamp())))))::pg_catalog.int8"
    );
    format!(
        "SELECT r.o_outcome, r.o_ms, r.o_holder, r.o_fencing, r.o_holds \
         FROM ROWS FROM (pg_catalog.unnest({keys}::pg_catalog.text[]), \
         pg_catalog.unnest({locks}::pg_catalog.int8[]), \
         pg_catalog.unnest({tokens}::pg_catalog.text[]), \
         pg_catalog.unnest({ttls}::pg_catalog.int8[]), \
         pg_catalog.unnest({graces}::pg_catalog.int8[])) \
         WITH ORDINALITY AS a(key, lock, token, ttl, grace, n) \
         CROSS JOIN LATERAL {function}('prolong'::pg_catalog.text, a.key, a.lock, a.token, \
         a.ttl, a.grace, NULL::pg_catalog.text, 0::pg_catalog.int8, {left}, \
         {durable}::pg_catalog.bool) r ORDER BY a.n"
    )
}

/// The values of a batch of prolongs, one array per argument, sorted by advisory lock id.
#[derive(Debug, Default)]
pub(crate) struct Prolongs {
    pub(crate) keys: Vec<String>,
    pub(crate) locks: Vec<i64>,
    /// SHA-256 digests (`Token::digest`), never tokens.
    pub(crate) tokens: Vec<String>,
    pub(crate) ttls: Vec<i64>,
    pub(crate) graces: Vec<i64>,
}

/// How the backend sends its statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Statements {
    /// Prepared once per connection and then only bound and executed: the fastest (about
    /// half the server's work per call of [`Statements::Simple`] on a fresh benchmark, see
    /// `BENCHMARKS.md`). Works directly and through PgBouncer 1.21 or later
    /// (`max_prepared_statements` above 0), in any pool mode. The default.
    #[default]
    Prepared,
    /// Parsed anew on every call, with the values written into the text (as hex), over the
    /// simple query protocol: no state on the server between calls, so it works through any
    /// transaction-pooling proxy, PgBouncer before 1.21 included. `statements=simple` in a
    /// URL.
    Simple,
}

/// What every call of one backend pins, whatever the server's, database's or role's
/// settings say: READ COMMITTED (the function must see what the statement it waited for
/// committed), the backend's deadline, and (unless durable) no wait for the WAL flush.
#[derive(Debug)]
pub(crate) struct Session {
    /// The deadline in ms, as `statement_timeout` and `lock_timeout` take it.
    pub(crate) deadline_ms: i64,
    pub(crate) durable: bool,
    /// What a simple-form call starts with: the settings as `SET TRANSACTION` and `SET
    /// LOCAL`. Built once per backend.
    pub(crate) preamble: String,
}

impl Session {
    pub(crate) fn new(deadline: Duration, durable: bool) -> Self {
        let ms = u64::try_from(deadline.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, i32::MAX as u64);
        let mut preamble = format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; \
             SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = 0; "
        );
        if !durable {
            preamble.push_str("SET LOCAL synchronous_commit = off; ");
        }
        Session {
            deadline_ms: i64::try_from(ms).unwrap_or(i64::MAX),
            durable,
            preamble,
        }
    }
}

/// The values of one call besides the operation and the key.
#[derive(Default)]
pub(crate) struct Args<'a> {
    pub(crate) token: Option<&'a str>,
    pub(crate) ttl_ms: u64,
    pub(crate) grace_ms: u64,
    pub(crate) holder: Option<&'a str>,
    pub(crate) delay_ms: u64,
}

/// `"name"`: a name already checked to be a plain identifier ([`Names::new`]).
fn quoted(name: &str) -> String {
    format!("\"{name}\"")
}

/// A text value as an expression that cannot be misread, whatever it holds.
pub(crate) fn text(s: &str) -> String {
    let mut hex = String::with_capacity(s.len() * 2 + 40);
    hex.push_str("pg_catalog.convert_from(pg_catalog.decode('");
    for b in s.as_bytes() {
        let _ = write!(hex, "{b:02x}");
    }
    hex.push_str("', 'hex'), 'UTF8')");
    hex
}

/// The advisory lock id of a name: the first 8 bytes of its SHA-256, big-endian, as a
/// signed 64-bit integer. Stable across versions, platforms and Postgres releases.
pub(crate) fn advisory_id(name: &str) -> i64 {
    let digest = Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

#[cfg(test)]
mod tests;
