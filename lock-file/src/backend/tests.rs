use super::*;
use lock_core::backend::{ObtainRequest, ProlongRequest, ReleaseRequest};
use lock_core::{LockBackend, ObtainOutcome, ProlongOutcome, ReleaseOutcome};
use std::time::Duration;

#[test]
fn a_write_counter_at_its_maximum_is_a_corrupt_record() {
    let err = io::Error::new(io::ErrorKind::InvalidData, "seq at its maximum");
    let err = io_error(Operation::Obtain, Path::new("/locks/k"), err);
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
}

/// A backend in a fresh directory, and two owners of one key.
struct Clocked {
    _dir: tempfile::TempDir,
    backend: FileBackend,
    key: Key,
    holder: HolderInfo,
}

impl Clocked {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let backend = FileBackend::new(dir.path().join("locks")).unwrap();
        Clocked {
            _dir: dir,
            backend,
            key: Key::new("clocked").unwrap(),
            holder: HolderInfo::current(),
        }
    }

    /// Whether `token` gets the key for a minute (else it is busy).
    async fn acquires(&self, token: &lock_core::backend::Token) -> bool {
        let req = ObtainRequest::new(
            &self.key,
            token,
            Ttl::new(Duration::from_secs(60)).unwrap(),
            &self.holder,
        );
        match self.backend.obtain(req).await.unwrap() {
            ObtainOutcome::Acquired { .. } => true,
            ObtainOutcome::Busy(_) => false,
            other => panic!("{other:?}"),
        }
    }
}

fn token() -> lock_core::backend::Token {
    lock_core::backend::Token::generate().unwrap()
}

/// `date -s` an hour ahead while a lock is held: the lock still runs its ttl, and its
/// holder prolongs it on time. On the wall clock alone, the step ended it at once.
#[tokio::test]
async fn a_wall_clock_step_neither_ends_nor_stretches_a_lock() {
    use crate::clock::test_hook;
    let t = Clocked::new();
    let (a, b) = (token(), token());
    let minute = Duration::from_secs(60);
    assert!(t.acquires(&a).await);
    test_hook::step_wall(Duration::from_secs(3600));
    assert!(!t.acquires(&b).await);
    let prolong = ProlongRequest {
        key: &t.key,
        token: &a,
        ttl: Ttl::new(minute).unwrap(),
    };
    assert_eq!(
        t.backend.prolongate(prolong).await.unwrap(),
        ProlongOutcome::Prolonged
    );
    // A suspend runs the record's clock on, as it runs the client's validity on.
    test_hook::sleep(2 * minute);
    assert!(t.acquires(&b).await);
}

/// After a reboot no holder of the old boot lives, but a cooldown still runs on the
/// wall clock: a job that must not run twice within the hour does not run again
/// because the machine restarted.
#[tokio::test]
async fn a_cooldown_lasts_across_a_reboot_on_the_wall_clock() {
    use crate::clock::test_hook;
    let t = Clocked::new();
    let (a, b) = (token(), token());
    let minute = Duration::from_secs(60);
    assert!(t.acquires(&a).await);
    let release = ReleaseRequest {
        key: &t.key,
        token: &a,
        delay_after: Some(Ttl::new(60 * minute).unwrap()),
    };
    assert_eq!(
        t.backend.release(release).await.unwrap(),
        ReleaseOutcome::Released
    );
    test_hook::reboot("another-boot");
    assert!(!t.acquires(&b).await);
    test_hook::step_wall(61 * minute);
    assert!(t.acquires(&b).await);
}

/// A record an older lock-file wrote (no anchor) is judged on the wall clock.
#[tokio::test]
async fn a_record_without_an_anchor_is_on_the_wall_clock() {
    use crate::clock::test_hook;
    let t = Clocked::new();
    let (a, b) = (token(), token());
    let minute = Duration::from_secs(60);
    assert!(t.acquires(&a).await);
    let path = t.backend.record_path(&t.key);
    let file = open(&path, true).unwrap();
    let slots = Slots::read(&file).unwrap();
    let mut old = slots.current().unwrap().unwrap().clone();
    assert!(old.clock.is_some(), "a new record carries its anchor");
    old.clock = None;
    slots.write_next(&file, old).unwrap();
    assert!(!t.acquires(&b).await);
    test_hook::step_wall(2 * minute);
    assert!(t.acquires(&b).await);
}
