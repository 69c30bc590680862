//! A row's record as the SQL backends' lock table holds it, both ways: the columns a
//! runner writes for [`Before`] ([`Before::sql_row`]) and the [`Seen`] it decodes from the
//! columns it reads back ([`SqlRow::seen`]). Each runner keeps its own SQL (placeholders,
//! column types, time units); the mapping is written once here.

use super::vocabulary::*;

/// The digests of [`Who::A`]'s, [`Who::B`]'s and [`Who::C`]'s tokens as a backend stores
/// them, looked up both ways.
#[derive(Debug, Clone)]
pub struct Digests([String; 3]);

impl Digests {
    /// The digests of A's, B's and C's tokens, in that order.
    pub fn new(a: String, b: String, c: String) -> Self {
        Digests([a, b, c])
    }

    /// The digest of `who`'s token.
    pub fn of(&self, who: Who) -> String {
        self.0[Self::index(who)].clone()
    }

    /// Whose token `stored` is the digest of, if anyone's of the three.
    pub fn who(&self, stored: &str) -> Option<Who> {
        [Who::A, Who::B, Who::C]
            .into_iter()
            .find(|&w| self.0[Self::index(w)] == stored)
    }

    fn index(who: Who) -> usize {
        match who {
            Who::A => 0,
            Who::B => 1,
            Who::C => 2,
        }
    }
}

/// The columns of one row of a SQL lock table, times in milliseconds since the epoch (a
/// runner scales them to its columns' unit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlRow {
    /// `held`, `cooling`, `free` or `shared`.
    pub state: String,
    /// The holder's token digest; `''` for shared holds; `None` when nobody holds.
    pub token: Option<String>,
    /// The holder info (JSON), when held or shared.
    pub holder: Option<String>,
    /// The key's last fencing token.
    pub fencing: u64,
    /// The hold count, when held.
    pub holds: Option<u32>,
    /// The end of the ttl (of the hold that ends last, when shared) or of the cooldown.
    pub expires: i64,
    /// The end of the grace period (the last one, when shared).
    pub forget: i64,
    /// The `shares` column (JSON), when shared.
    pub shares: Option<String>,
    /// The `writer` column (JSON): a waiting writer's marker.
    pub writer: Option<String>,
}

impl Before {
    /// The row a SQL lock table holds for this record at `now` (ms), tokens spelled by
    /// `digests`, holder info `holder`, shared holds as
    /// [`lock_core::backend::rules::columns`] stores them (times in µs in the JSON);
    /// `None` for [`Before::Nothing`].
    pub fn sql_row(self, now: i64, digests: &Digests, holder: &str) -> Option<SqlRow> {
        let r = self.row(now)?;
        let shared = self.shared_at(now).map(|s| {
            let row = s.columns(1000, |w| digests.of(w), holder);
            let (expires, forget) = (row.expires.unwrap_or(now), row.forget.unwrap_or(now));
            (row.shares, row.writer, expires, forget)
        });
        let held = r.by.is_some() || shared.is_some();
        let (token, shares, writer, expires, forget) = match shared {
            Some((shares, writer, expires, forget)) => {
                (Some(String::new()), Some(shares), writer, expires, forget)
            }
            None => (r.by.map(|w| digests.of(w)), None, None, r.expires, r.forget),
        };
        Some(SqlRow {
            state: r.state.to_owned(),
            token,
            holder: held.then(|| holder.to_owned()),
            fencing: FENCING,
            holds: r.by.map(|_| r.holds),
            expires,
            forget,
            shares,
            writer,
        })
    }
}

impl SqlRow {
    /// What the row says, relative to `now` (ms), tokens named by `digests`.
    ///
    /// # Panics
    /// On a row no backend writes (a held row without its token or count, shares that are
    /// not JSON of [`Seen::shared_from_json`]'s shape): the runner's test fails, naming it.
    pub fn seen(&self, now: i64, digests: &Digests) -> Seen {
        let fencing = self.fencing;
        match self.state.as_str() {
            "free" => Seen::Free { fencing },
            "cooling" => Seen::Cooling {
                fencing,
                left_ms: self.expires - now,
            },
            "shared" => {
                let parse = |json: &str| {
                    serde_json::from_str::<serde_json::Value>(json)
                        .unwrap_or_else(|e| panic!("stored JSON {json:?}: {e}"))
                };
                let shares = parse(self.shares.as_deref().expect("a shared row's shares"));
                let writer = self.writer.as_deref().map(parse);
                Seen::shared_from_json(fencing, &shares, writer.as_ref(), 1000, now, |t| {
                    digests.who(t)
                })
                .unwrap_or_else(|| panic!("shares of another shape: {shares}"))
            }
            _ => Seen::Held {
                by: digests.who(self.token.as_deref().expect("a held row's token")),
                holds: self.holds.expect("a held row's count"),
                fencing,
                expires_in_ms: self.expires - now,
                forget_in_ms: self.forget - now,
            },
        }
    }
}
