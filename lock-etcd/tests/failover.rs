//! Failover on three members: the leader SIGKILLed, paused (SIGSTOP) and moved while a
//! holder holds (its watchdog renewing) and a waiter waits. Never two holders: the waiter
//! gets the lock only once the holder released it or heard that it lost it; fencing grows;
//! the waiter gets the lock after the release. And what etcd's lease reset does to a dead
//! holder's lock, and when a holder cut off from the quorum hears `lost()`.
//!
//! The members run with a 10 ms heartbeat and a 100 ms election timeout, so an election
//! takes a fraction of a second; every bound below leaves seconds of room.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{ObtainRequest, Token};
use lock_core::{HolderInfo, Key, LockBackend, Locker, ObtainOutcome, ReleaseOutcome, Ttl};
use test_servers::etcd::EtcdCluster;
use tokio::task::block_in_place;
use tokio::time::Instant;

/// The ttl of the holds: long enough that a renewal held up by a failover (each call's
/// deadline is 1 s: `support::backend_at`) still lands within it.
const TTL: Duration = Duration::from_secs(4);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    Kill,
    Pause,
    Move,
}

/// A holder holds through `fault` on the leader while a waiter waits; then releases.
async fn a_holder_and_a_waiter_live_through(fault: Fault) {
    let mut cluster = block_in_place(|| EtcdCluster::start(3));
    let endpoints = cluster.endpoints();
    let prefix = support::fresh_prefix();
    let holder = Locker::new(Arc::new(support::backend_at(&endpoints, &prefix).await));
    let waiter = Locker::new(Arc::new(support::backend_at(&endpoints, &prefix).await));
    let guard = holder
        .lock("job")
        .ttl(TTL)
        .watchdog()
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .expect("a fresh key is free");
    let first = guard.fencing();
    // Whether the holder still counts the lock as its own: neither released nor lost.
    let released = Arc::new(AtomicBool::new(false));
    let lost = guard.lost_token();
    let waiting = {
        let (released, lost) = (Arc::clone(&released), lost.clone());
        tokio::spawn(async move {
            let got = waiter
                .lock("job")
                .ttl(TTL)
                .wait(Duration::from_secs(60))
                .obtain()
                .await
                .expect("the waiter's obtain");
            let guard = got
                .obtained()
                .expect("the waiter gets the lock within 60 s");
            assert!(
                released.load(Ordering::SeqCst) || lost.is_cancelled(),
                "two holders: the waiter got the lock while the holder still held it"
            );
            let fencing = guard.fencing();
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            fencing
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let leader = block_in_place(|| cluster.wait_for_leader());
    let started = Instant::now();
    block_in_place(|| match fault {
        Fault::Kill => cluster.stop(leader, true),
        Fault::Pause => cluster.signal(leader, "STOP"),
        Fault::Move => cluster.move_leader((leader + 1) % 3),
    });
    let new_leader = block_in_place(|| cluster.wait_for_leader());
    assert_ne!(new_leader, leader, "{fault:?}: the leadership moved");
    eprintln!(
        "{fault:?}: a new leader {:?} after the fault",
        started.elapsed()
    );
    // Past the ttl: the holder's renewals went through the new leader.
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    assert!(
        !guard.is_lost(),
        "{fault:?}: the holder lost its lock across the failover"
    );
    assert!(
        !waiting.is_finished(),
        "{fault:?}: the waiter got a held lock"
    );
    released.store(true, Ordering::SeqCst);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    let second = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter got the lock after the release")
        .expect("the waiter's task");
    assert!(second > first, "{fault:?}: fencing {second} after {first}");
    if fault == Fault::Pause {
        block_in_place(|| cluster.signal(leader, "CONT"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_keeps_one_holder_and_hands_the_lock_on() {
    a_holder_and_a_waiter_live_through(Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_paused_keeps_one_holder_and_hands_the_lock_on() {
    a_holder_and_a_waiter_live_through(Fault::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_moved_keeps_one_holder_and_hands_the_lock_on() {
    a_holder_and_a_waiter_live_through(Fault::Move).await;
}

/// A holder whose member loses the quorum (the other two paused) cannot renew: the member
/// refuses every call (no leader), and the holder hears `lost()` by the end of the validity
/// it counted, never later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_from_the_quorum_hears_lost_by_its_validity_end() {
    let mut cluster = block_in_place(|| EtcdCluster::start(3));
    let leader = block_in_place(|| cluster.wait_for_leader());
    let alone = (leader + 1) % 3;
    let prefix = support::fresh_prefix();
    let locker = Locker::new(Arc::new(
        support::backend_at(&[cluster.endpoint(alone)], &prefix).await,
    ));
    let ttl = Duration::from_secs(3);
    let guard = locker
        .lock("cut-off")
        .ttl(ttl)
        .watchdog()
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .expect("a fresh key is free");
    // The last moment the validity can have been renewed from is now.
    let cut = Instant::now();
    block_in_place(|| {
        for i in (0..3).filter(|&i| i != alone) {
            cluster.signal(i, "STOP");
        }
    });
    tokio::time::timeout(ttl + Duration::from_millis(500), guard.lost())
        .await
        .expect("lost() fired by the end of the validity");
    let heard = cut.elapsed();
    eprintln!("cut off from the quorum: lost() fired {heard:?} after the cut (ttl {ttl:?})");
    assert!(
        heard <= ttl + Duration::from_millis(100),
        "lost() late: {heard:?}"
    );
    block_in_place(|| {
        for i in (0..3).filter(|&i| i != alone) {
            cluster.signal(i, "CONT");
        }
    });
}

/// A holder that dies without releasing keeps its lock until its lease ends, and a leader
/// change restarts the lease at its full ttl (etcd#9395): the lock is free again no sooner
/// than the ttl after the grant was sent, and here only after the ttl counted again from
/// the leader change. Measured for GUARANTEES.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_lock_outlives_a_leader_change_by_up_to_its_ttl() {
    let cluster = block_in_place(|| EtcdCluster::start(3));
    let prefix = support::fresh_prefix();
    let dead: Arc<dyn LockBackend> =
        Arc::new(support::backend_at(&cluster.endpoints(), &prefix).await);
    let other = Locker::new(Arc::new(
        support::backend_at(&cluster.endpoints(), &prefix).await,
    ));
    let (key, token) = (Key::new("dead").unwrap(), Token::generate().unwrap());
    let ttl = Duration::from_secs(3);
    let holder = HolderInfo::current();
    let sent = Instant::now();
    let req = ObtainRequest::new(&key, &token, Ttl::new(ttl).unwrap(), &holder);
    assert!(matches!(
        dead.obtain(req).await.unwrap(),
        ObtainOutcome::Acquired { .. }
    ));
    // The holder dies here: nothing renews or releases its hold.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = block_in_place(|| cluster.wait_for_leader());
    let moved = Instant::now();
    block_in_place(|| cluster.move_leader((leader + 1) % 3));
    let got = other
        .lock("dead")
        .wait(Duration::from_secs(20))
        .obtain()
        .await
        .unwrap();
    let free = sent.elapsed();
    assert!(got.obtained().is_some(), "free within 20 s");
    eprintln!(
        "a dead holder's 3 s lock with a leader change 2 s in: free {free:?} after the grant \
         was sent ({:?} after the change)",
        moved.elapsed()
    );
    assert!(free >= ttl, "free before its ttl: {free:?}");
    assert!(
        free >= Duration::from_secs(2) + ttl - Duration::from_millis(100),
        "the lease did not restart at the leader change: free {free:?} after the grant"
    );
}
