//! The suite must catch a backend whose listing breaks a rule: each wrapper below breaks
//! one (what a page holds, where the next one starts, what the capabilities promise), and
//! the named case must fail on it while the healthy memory backend passes it.

#[macro_use]
mod broken_support;

use std::sync::Arc;

use lock_conformance::{async_trait, cases, Harness};
use lock_core::backend::layer::{Layer, Layered};
use std::time::Duration;

use lock_core::backend::{
    Capabilities, Cursor, KeyPage, KeysRequest, Listing, ObtainRequest, ReleaseRequest,
};
use lock_core::{Key, LockBackend, MemoryBackend, ObtainOutcome, ReleaseOutcome, Result};

#[derive(Debug, Clone, Copy)]
enum Bug {
    /// Says it lists in key order, and lists nothing.
    ListsNothing,
    /// Lists every key, whatever the prefix asked.
    PrefixIgnored,
    /// Puts every key in one page, whatever the limit.
    LimitIgnored,
    /// The next page starts one key too far: the key at each page's edge is never listed.
    EdgeKeyDropped,
    /// The next page starts one key too early: the key at each page's edge shows twice.
    EdgeKeyRepeated,
    /// Says it cannot list, and answers an empty page instead of `Unsupported`.
    UnsupportedAnsweredEmpty,
    /// Refuses the shared holds of waiting records: waiters never show.
    WaitersUnrecorded,
    /// Answers the release of a waiting record without releasing it: a wait that ended
    /// still shows.
    WaitersNeverLeave,
}

#[derive(Debug)]
struct Broken {
    inner: MemoryBackend,
    bug: Bug,
}

#[async_trait]
impl Layer for Broken {
    fn inner(&self) -> &dyn LockBackend {
        &self.inner
    }

    fn name(&self) -> &'static str {
        "broken"
    }

    fn capabilities(&self) -> Capabilities {
        let caps = self.inner.capabilities();
        match self.bug {
            Bug::UnsupportedAnsweredEmpty => caps.listing(Listing::Unsupported),
            _ => caps,
        }
    }

    async fn obtain(&self, req: ObtainRequest<'_>) -> Result<ObtainOutcome> {
        if matches!(self.bug, Bug::WaitersUnrecorded) && is_record(req.key) {
            return Ok(ObtainOutcome::Busy(lock_core::Busy::cooling(
                Duration::from_secs(1),
            )));
        }
        self.inner.obtain(req).await
    }

    async fn release(&self, req: ReleaseRequest<'_>) -> Result<ReleaseOutcome> {
        if matches!(self.bug, Bug::WaitersNeverLeave) && is_record(req.key) {
            return Ok(ReleaseOutcome::Released);
        }
        self.inner.release(req).await
    }

    async fn list_keys(&self, req: KeysRequest<'_>) -> Result<KeyPage> {
        match self.bug {
            Bug::ListsNothing | Bug::UnsupportedAnsweredEmpty => Ok(KeyPage::default()),
            Bug::WaitersUnrecorded | Bug::WaitersNeverLeave => self.inner.list_keys(req).await,
            Bug::PrefixIgnored => {
                self.inner
                    .list_keys(KeysRequest { prefix: "", ..req })
                    .await
            }
            Bug::LimitIgnored => {
                let limit = KeysRequest::MAX_LIMIT;
                self.inner.list_keys(KeysRequest { limit, ..req }).await
            }
            Bug::EdgeKeyDropped => {
                let limit = req.limit + 1;
                let mut page = self.inner.list_keys(KeysRequest { limit, ..req }).await?;
                if page.keys.len() == limit {
                    let edge = page.keys.pop().expect("a full page");
                    page.next = Some(Cursor::new(edge.as_str()));
                }
                Ok(page)
            }
            Bug::EdgeKeyRepeated => {
                let mut page = self.inner.list_keys(req).await?;
                if page.next.is_some() && page.keys.len() >= 2 {
                    let before = &page.keys[page.keys.len() - 2];
                    page.next = Some(Cursor::new(before.as_str()));
                }
                Ok(page)
            }
        }
    }
}

fn is_record(key: &Key) -> bool {
    key.as_str().starts_with(lock_core::waiting::RECORD_PREFIX)
}

struct BrokenHarness(Bug);

#[async_trait]
impl Harness for BrokenHarness {
    async fn backend(&self) -> Arc<dyn LockBackend> {
        Arc::new(Layered(Broken {
            inner: MemoryBackend::new(),
            bug: self.0,
        }))
    }
}

catches_where_memory_passes!(
    a_listing_of_nothing_is_caught,
    ListsNothing,
    listing_agrees_with_inspect
);
catches_where_memory_passes!(
    a_prefix_ignored_is_caught,
    PrefixIgnored,
    listing_agrees_with_inspect
);
catches_where_memory_passes!(
    a_limit_ignored_is_caught,
    LimitIgnored,
    listing_agrees_with_inspect
);
catches_where_memory_passes!(
    a_key_dropped_at_a_page_s_edge_is_caught,
    EdgeKeyDropped,
    listing_pages_cover_every_key_while_keys_come_and_go
);
catches_where_memory_passes!(
    a_key_repeated_at_a_page_s_edge_is_caught,
    EdgeKeyRepeated,
    listing_pages_cover_every_key_while_keys_come_and_go
);
catches_where_memory_passes!(
    an_empty_page_for_unsupported_is_caught,
    UnsupportedAnsweredEmpty,
    listing_agrees_with_inspect
);
catches_where_memory_passes!(
    waiters_never_recorded_are_caught,
    WaitersUnrecorded,
    waiters_show_in_the_listing_while_they_wait
);
catches_where_memory_passes!(
    waiters_that_never_leave_are_caught,
    WaitersNeverLeave,
    waiters_show_in_the_listing_while_they_wait
);
