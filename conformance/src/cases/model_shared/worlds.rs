//! Every state the key can be in ([`World`]s), and what the answers so far showed: each
//! call moves every world on to the window in which the backend applied it (a hold that may
//! or may not have ended becomes two worlds), and its answer keeps the worlds that expect
//! it; no world left is a failure.

use std::time::Duration;

use lock_core::backend::Expiry;
use lock_core::Fencing;
use tokio::time::Instant;

use super::reference::World;
use crate::cases::model::reference::Window;

/// Every state the key can be in, and what the answers so far showed.
pub(super) struct Model {
    worlds: Vec<World>,
    /// How the backend's server ends holds (its capabilities): never before the ttl asked,
    /// at the latest [`Expiry::longest`] after it was set.
    expiry: Expiry,
    /// The last fencing token an admission carried.
    pub(super) last_fencing: Option<Fencing>,
}

/// More states than this at once is a model gone wrong, not a backend.
const MOST_WORLDS: usize = 4096;

impl Model {
    pub(super) fn new(expiry: Expiry) -> Self {
        Model {
            worlds: vec![World::default()],
            expiry,
            last_fencing: None,
        }
    }

    /// Moves every world on to a call applied within `at`, keeps those where `judge` (which
    /// moves the world as the call did) accepts the answer, and fails with the first
    /// world's objection when none does.
    pub(super) fn step(
        &mut self,
        at: Window,
        mut judge: impl FnMut(&mut World) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut kept: Vec<World> = Vec::new();
        let mut objection = None;
        let futures: Vec<World> = self
            .worlds
            .iter()
            .flat_map(|w| w.futures(self.expiry, at))
            .collect();
        let considered = futures.len();
        for mut w in futures {
            match judge(&mut w) {
                Ok(()) if !kept.contains(&w) => kept.push(w),
                Ok(()) => {}
                Err(why) => {
                    objection.get_or_insert(why);
                }
            }
        }
        if kept.is_empty() {
            let why = objection.unwrap_or_else(|| "no state to judge".into());
            return Err(match considered {
                1 => why,
                n => format!("{why} (and in every other of the {n} states the key could be in)"),
            });
        }
        if kept.len() > MOST_WORLDS {
            return Err(format!("the model keeps {} states at once", kept.len()));
        }
        self.worlds = kept;
        Ok(())
    }

    /// The instant by which every short hold and marker of every world has surely ended.
    pub(super) fn short_ends(&self, short: Duration) -> Option<Instant> {
        self.worlds
            .iter()
            .filter_map(|w| w.last_end(self.expiry, short))
            .max()
    }
}
