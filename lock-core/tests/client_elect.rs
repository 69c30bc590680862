//! Leader election (`Locker::elect`, `Locker::observe`) on the memory backend.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{Fencing, LockBackend, Locker, MemoryBackend, ReleaseOutcome, Retry};

fn locker(backend: Arc<MemoryBackend>) -> Locker {
    Locker::new(backend).with_retry(
        Retry::exponential(Duration::from_millis(1), Duration::from_millis(20)).notified(),
    )
}

/// Four candidates, each elected three times: never two leaders at once, and every term
/// higher than the one before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_terms_only_grow() {
    let locker = locker(Arc::new(MemoryBackend::new()));
    let leading = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(Mutex::new(Vec::<Fencing>::new()));
    let mut candidates = Vec::new();
    for i in 0..4 {
        let (locker, leading, terms) = (locker.clone(), leading.clone(), terms.clone());
        candidates.push(tokio::spawn(async move {
            for _ in 0..3 {
                let leader = locker
                    .elect("scheduler")
                    .identity(format!("candidate {i}"))
                    .lead()
                    .await
                    .unwrap()
                    .obtained()
                    .expect("elected in the end");
                let ran = leader
                    .while_leading(|term| {
                        let (leading, terms) = (leading.clone(), terms.clone());
                        async move {
                            assert_eq!(leading.fetch_add(1, Ordering::SeqCst), 0, "two leaders");
                            terms.lock().unwrap().push(term);
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            leading.fetch_sub(1, Ordering::SeqCst);
                        }
                    })
                    .await;
                assert!(ran.is_some(), "the leadership lasted");
                assert_eq!(leader.resign().await.unwrap(), ReleaseOutcome::Released);
            }
        }));
    }
    for c in candidates {
        tokio::time::timeout(Duration::from_secs(60), c)
            .await
            .expect("every candidate is elected in time")
            .unwrap();
    }
    let terms = terms.lock().unwrap().clone();
    assert_eq!(terms.len(), 12);
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
}

/// A leadership taken away (an operator force-releases the key) is lost: the work running
/// while leading is dropped, and a new candidate leads with a higher term.
#[tokio::test]
async fn a_lost_leadership_stops_the_work_and_a_successor_leads_higher() {
    let backend = Arc::new(MemoryBackend::new());
    let locker = locker(backend.clone());
    let leader = locker
        .elect("jobs")
        .ttl(Duration::from_millis(600))
        .lead()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let key = leader.key().clone();
    let forced = {
        let backend = backend.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            backend.force_release(&key).await.unwrap();
        })
    };
    let work = leader.while_leading(|_| std::future::pending::<()>());
    let ran = tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .expect("the loss is noticed within the ttl");
    assert!(ran.is_none(), "work stopped when the leadership was lost");
    assert!(leader.is_lost());
    assert!(
        leader.while_leading(|_| async {}).await.is_none(),
        "no new work"
    );
    forced.await.unwrap();
    let successor = locker
        .elect("jobs")
        .lead()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert!(successor.term() > leader.term());
    let _ = leader.resign().await;
    assert_eq!(successor.resign().await.unwrap(), ReleaseOutcome::Released);
}

/// An observer sees the leader, the time without one, and the next leader, with its
/// identity and a higher term.
#[tokio::test]
async fn an_observer_follows_every_leader() {
    let locker = locker(Arc::new(MemoryBackend::new()));
    let mut who = locker
        .observe("api")
        .unwrap()
        .every(Duration::from_millis(10));
    assert_eq!(who.changed().await.unwrap(), None, "nobody leads yet");
    let first = locker
        .elect("api")
        .identity("a")
        .lead()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let seen = who.changed().await.unwrap().expect("a leader");
    assert_eq!(seen.term, first.term());
    assert_eq!(seen.holder.metadata.as_deref(), Some("a"));
    let first_term = first.term();
    assert_eq!(first.resign().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(
        who.changed().await.unwrap(),
        None,
        "the resignation is seen"
    );
    let second = locker
        .elect("api")
        .identity("b")
        .lead()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let seen = who.changed().await.unwrap().expect("the next leader");
    assert_eq!(seen.holder.metadata.as_deref(), Some("b"));
    assert!(seen.term > first_term);
    assert_eq!(second.resign().await.unwrap(), ReleaseOutcome::Released);
}

/// A candidate with a wait that runs out while another leads gets Busy, naming the leader.
#[tokio::test]
async fn a_campaign_that_waits_too_little_names_the_leader() {
    let locker = locker(Arc::new(MemoryBackend::new()));
    let leader = locker
        .elect("cron")
        .identity("first")
        .lead()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let busy = locker
        .elect("cron")
        .wait(Duration::from_millis(30))
        .lead()
        .await
        .unwrap()
        .into_result()
        .expect_err("another leads");
    let holder = busy.holder.expect("the leader");
    assert_eq!(holder.metadata.as_deref(), Some("first"));
    assert_eq!(leader.resign().await.unwrap(), ReleaseOutcome::Released);
}

/// An observer whose reads are a minute apart hears a resignation at once, through the
/// backend's release notifications, not at its next read; and a leadership's `lost()` is
/// pending while it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_hears_a_resignation_at_once() {
    use futures_util::FutureExt;

    let locker = locker(Arc::new(MemoryBackend::new()));
    let leader = locker
        .elect("cron")
        .ttl(Duration::from_secs(60))
        .identity("a")
        .lead()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    assert!(
        leader.lost().now_or_never().is_none(),
        "lost() while leading"
    );
    assert!(leader.remaining() > Duration::from_secs(50));
    assert!(
        format!("{leader:?}").contains(&leader.term().to_string()),
        "{leader:?}"
    );
    let mut who = locker
        .observe("cron")
        .unwrap()
        .every(Duration::from_secs(60));
    assert!(format!("{who:?}").contains("cron"), "{who:?}");
    let seen = who.changed().await.unwrap().expect("the leader");
    assert_eq!(seen.term, leader.term());
    let resigned = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        leader.resign().await.unwrap()
    });
    let next = tokio::time::timeout(Duration::from_secs(5), who.changed())
        .await
        .expect("heard within 5 s, not at the next read a minute later");
    assert_eq!(next.unwrap(), None);
    assert_eq!(resigned.await.unwrap(), ReleaseOutcome::Released);
}

/// The docs' own shape: one process observes who leads and campaigns. A resignation wakes
/// the waiting candidate at once (the notification is its, not the observer's), long before
/// its poll a minute later; the observer hears it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resignation_wakes_the_waiting_candidate_with_an_observer_present() {
    let backend = Arc::new(MemoryBackend::new());
    let locker = Locker::new(backend).with_retry(Retry::linear(Duration::from_secs(60)).notified());
    let leader = locker
        .elect("jobs")
        .ttl(Duration::from_secs(120))
        .lead()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    // The observer subscribes first: it stands before the candidate in the key's line.
    let mut who = locker
        .observe("jobs")
        .unwrap()
        .every(Duration::from_secs(60));
    assert_eq!(who.changed().await.unwrap().unwrap().term, leader.term());
    let candidate = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .elect("jobs")
                .ttl(Duration::from_secs(120))
                .lead()
                .await
                .unwrap()
                .obtained()
                .unwrap()
        })
    };
    // The candidate found the key busy and waits on its subscription.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resigned_at = tokio::time::Instant::now();
    assert_eq!(leader.resign().await.unwrap(), ReleaseOutcome::Released);
    let next = tokio::time::timeout(Duration::from_secs(10), candidate)
        .await
        .expect("the candidate leads at once, not at its poll a minute later")
        .unwrap();
    assert!(resigned_at.elapsed() < Duration::from_secs(10));
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(l) = who.changed().await.unwrap() {
                return l;
            }
        }
    })
    .await
    .expect("the observer sees the new leader");
    assert_eq!(seen.term, next.term());
    assert_eq!(next.resign().await.unwrap(), ReleaseOutcome::Released);
}

/// An observer whose first subscription fails subscribes again at its next pass, and then
/// hears a resignation at once rather than polling for its life.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_whose_subscribe_failed_subscribes_again() {
    use lock_core::backend::layer::{Layer, Layered};
    use lock_core::backend::{async_trait, ReleaseSubscription};
    use lock_core::{Error, ErrorKind, Key, Operation, Result};

    #[derive(Debug, Default)]
    struct FailsFirstSubscribe {
        inner: MemoryBackend,
        failed: std::sync::atomic::AtomicBool,
    }

    #[async_trait]
    impl Layer for FailsFirstSubscribe {
        fn inner(&self) -> &dyn LockBackend {
            &self.inner
        }

        async fn subscribe(&self, key: &Key) -> Result<Option<ReleaseSubscription>> {
            if !self.failed.swap(true, Ordering::SeqCst) {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    "memory",
                    Operation::Subscribe,
                    "the notification connection dropped",
                ));
            }
            self.inner.subscribe(key).await
        }
    }

    let locker = Locker::new(Arc::new(Layered(FailsFirstSubscribe::default())));
    let leader = locker
        .elect("cron")
        .lead()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let mut who = locker
        .observe("cron")
        .unwrap()
        .every(Duration::from_millis(300));
    assert_eq!(who.changed().await.unwrap().unwrap().term, leader.term());
    // A pass of the observer's loop: it subscribes again this time.
    assert!(
        tokio::time::timeout(Duration::from_millis(700), who.changed())
            .await
            .is_err(),
        "nothing changed"
    );
    let mut who = who.every(Duration::from_secs(60));
    let resigned = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        leader.resign().await.unwrap()
    });
    let next = tokio::time::timeout(Duration::from_secs(10), who.changed())
        .await
        .expect("heard at once through the second subscription");
    assert_eq!(next.unwrap(), None);
    assert_eq!(resigned.await.unwrap(), ReleaseOutcome::Released);
}
