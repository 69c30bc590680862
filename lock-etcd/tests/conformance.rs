//! The whole conformance suite on one etcd member, multi-process cases included.

mod support;

lock_conformance::suite!("etcd", support::Etcd::new());

/// The mutex suite again, every lock one permit of a semaphore of 1.
mod as_semaphore {
    lock_conformance::suite!(
        "etcd",
        lock_conformance::AsSemaphore(super::support::Etcd::new())
    );
}
