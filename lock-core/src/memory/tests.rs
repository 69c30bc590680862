//! The memory backend's own outcomes, namespaces, wake-ups and sweeps, on paused time.

use super::*;
use crate::{
    Busy, Fencing, LockBackend, LockState, ObtainOutcome, ObtainRequest, ProlongOutcome,
    ProlongRequest, ReleaseOutcome, ReleaseRequest,
};

struct Fixture {
    backend: MemoryBackend,
    key: Key,
    holder: HolderInfo,
}

fn ms(n: u64) -> Ttl {
    Ttl::from_millis(n).unwrap()
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            backend: MemoryBackend::new(),
            key: Key::new("k").unwrap(),
            holder: HolderInfo::current(),
        }
    }
    async fn obtain(&self, t: &Token, ttl: u64) -> ObtainOutcome {
        let req = ObtainRequest::new(&self.key, t, ms(ttl), &self.holder);
        self.backend.obtain(req).await.unwrap()
    }
    async fn prolong(&self, t: &Token, ttl: u64) -> ProlongOutcome {
        let req = ProlongRequest {
            key: &self.key,
            token: t,
            ttl: ms(ttl),
        };
        self.backend.prolongate(req).await.unwrap()
    }
    async fn release(&self, t: &Token, delay: Option<u64>) -> ReleaseOutcome {
        let req = ReleaseRequest {
            key: &self.key,
            token: t,
            delay_after: delay.map(ms),
        };
        self.backend.release(req).await.unwrap()
    }
}

fn tokens() -> (Token, Token) {
    (Token::generate().unwrap(), Token::generate().unwrap())
}

fn fencing(o: ObtainOutcome) -> Fencing {
    match o {
        ObtainOutcome::Acquired { fencing, .. } => fencing,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

async fn advance(ms: u64) {
    tokio::time::advance(Duration::from_millis(ms)).await;
}

#[tokio::test(start_paused = true)]
async fn obtain_outcomes() {
    let f = Fixture::new();
    let (a, b) = tokens();
    let first = fencing(f.obtain(&a, 100).await);
    assert_eq!(
        f.obtain(&a, 100).await,
        ObtainOutcome::Reacquired { holds: 2 }
    );
    match f.obtain(&b, 100).await {
        ObtainOutcome::Busy(Busy {
            holder: Some(h),
            remaining,
            ..
        }) => {
            assert_eq!(h, f.holder);
            assert_eq!(remaining, Duration::from_millis(100));
        }
        other => panic!("{other:?}"),
    }
    advance(100).await;
    assert!(
        fencing(f.obtain(&b, 100).await) > first,
        "expired lock is free, fencing grows"
    );
}

#[tokio::test(start_paused = true)]
async fn prolong_outcomes() {
    let f = Fixture::new();
    let (a, b) = tokens();
    let _ = f.obtain(&a, 100).await;
    assert_eq!(f.prolong(&a, 300).await, ProlongOutcome::Prolonged);
    assert_eq!(f.prolong(&b, 300).await, ProlongOutcome::Lost);
    advance(350).await;
    assert_eq!(f.prolong(&a, 100).await, ProlongOutcome::ProlongedLate);
    advance(150).await;
    let _ = f.obtain(&b, 100).await;
    assert_eq!(
        f.prolong(&a, 100).await,
        ProlongOutcome::Lost,
        "stolen after expiry"
    );
}

#[tokio::test(start_paused = true)]
async fn prolong_past_grace_is_lost() {
    let f = Fixture::new();
    let (a, _) = tokens();
    let _ = f.obtain(&a, 100).await;
    advance(200).await;
    assert_eq!(f.prolong(&a, 100).await, ProlongOutcome::Lost);
}

#[tokio::test(start_paused = true)]
async fn release_outcomes() {
    let f = Fixture::new();
    let (a, b) = tokens();
    let _ = f.obtain(&a, 100).await;
    let _ = f.obtain(&a, 100).await;
    assert_eq!(f.release(&b, None).await, ReleaseOutcome::Lost);
    assert_eq!(
        f.release(&a, Some(50)).await,
        ReleaseOutcome::Decremented { holds: 1 }
    );
    assert_eq!(f.release(&a, None).await, ReleaseOutcome::Released);
    assert_eq!(
        f.release(&a, None).await,
        ReleaseOutcome::Lost,
        "second release"
    );
    let _ = f.obtain(&a, 100).await;
    let _ = f.obtain(&a, 100).await;
    advance(150).await;
    assert_eq!(f.release(&a, None).await, ReleaseOutcome::ReleasedLate);
    assert_eq!(f.backend.inspect(&f.key).await.unwrap(), LockState::Free);
}

#[tokio::test(start_paused = true)]
async fn cooldown_blocks_everyone_then_frees() {
    let f = Fixture::new();
    let (a, b) = tokens();
    let _ = f.obtain(&a, 100).await;
    assert_eq!(f.release(&a, Some(200)).await, ReleaseOutcome::Released);
    for t in [&a, &b] {
        let busy = f.obtain(t, 100).await;
        assert_eq!(
            busy,
            ObtainOutcome::Busy(Busy::cooling(Duration::from_millis(200)))
        );
    }
    assert_eq!(f.prolong(&a, 100).await, ProlongOutcome::Lost);
    assert_eq!(f.release(&a, None).await, ReleaseOutcome::Lost);
    advance(200).await;
    let _ = fencing(f.obtain(&b, 100).await);
}

#[tokio::test(start_paused = true)]
async fn force_release_keeps_fencing_growing() {
    let f = Fixture::new();
    let (a, b) = tokens();
    let first = fencing(f.obtain(&a, 1000).await);
    assert!(matches!(
        f.backend.force_release(&f.key).await.unwrap(),
        LockState::Held { .. }
    ));
    let second = fencing(f.obtain(&b, 1000).await);
    assert!(second > first);
    assert_eq!(f.release(&a, None).await, ReleaseOutcome::Lost);
    f.backend.simulate_data_loss();
    assert_eq!(f.prolong(&b, 1000).await, ProlongOutcome::Lost);
    assert!(fencing(f.obtain(&a, 1000).await) > second);
}

#[tokio::test(start_paused = true)]
async fn namespaces_do_not_meet() {
    let f = Fixture::new();
    let other = f.backend.namespaced("other:");
    let (a, b) = tokens();
    let _ = fencing(f.obtain(&a, 1000).await);
    let req = ObtainRequest::new(&f.key, &b, ms(1000), &f.holder);
    assert!(matches!(
        other.obtain(req).await.unwrap(),
        ObtainOutcome::Acquired { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_release_wakes_one_waiter() {
    let f = Fixture::new();
    let (a, _) = tokens();
    let mut first = f.backend.subscribe(&f.key).await.unwrap().unwrap();
    let mut second = f.backend.subscribe(&f.key).await.unwrap().unwrap();
    let _ = f.obtain(&a, 1000).await;
    let _ = f.release(&a, None).await;
    let woken = [
        first.released_within(Duration::from_millis(10)).await,
        second.released_within(Duration::from_millis(10)).await,
    ];
    assert_eq!(woken, [true, false], "one release, one waiter woken");
}

#[tokio::test(start_paused = true)]
async fn subscription_sees_release() {
    let f = Fixture::new();
    let (a, _) = tokens();
    let mut sub = f.backend.subscribe(&f.key).await.unwrap().unwrap();
    let _ = f.obtain(&a, 1000).await;
    assert!(!sub.released_within(Duration::from_millis(10)).await);
    let _ = f.release(&a, None).await;
    assert!(sub.released_within(Duration::from_millis(10)).await);
}

#[tokio::test(start_paused = true)]
async fn expired_records_are_swept() {
    let f = Fixture::new();
    let holder = HolderInfo::current();
    for i in 0..3000 {
        let key = Key::new(format!("k{i}")).unwrap();
        let t = Token::generate().unwrap();
        let req = ObtainRequest::new(&key, &t, ms(1), &holder);
        let _ = f.backend.obtain(req).await.unwrap();
        advance(3).await;
    }
    assert!(
        f.backend.lock_store().records.len() <= 1024,
        "sweep keeps the store bounded"
    );
}
