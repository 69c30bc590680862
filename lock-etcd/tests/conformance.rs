//! The whole conformance suite on one etcd member and on a cluster of three, multi-process
//! cases included.

mod support;

lock_conformance::suite!("etcd", support::Etcd::new());

/// The mutex suite again, every lock one permit of a semaphore of 1.
mod as_semaphore {
    lock_conformance::suite!(
        "etcd",
        lock_conformance::AsSemaphore(super::support::Etcd::new())
    );
}

/// The whole suite on three members: every call may land on any of them.
mod three_members {
    lock_conformance::suite!(
        "etcd",
        super::support::Etcd::on(super::support::cluster_of_three)
    );
}
