//! The whole conformance suite on every topology and variant of lock-redis, one module
//! each, multi-process cases included (the suite runs each module's worker in a child
//! process by its full test path).
//!
//! The shared server is the one at `REDIS_URL` (or 127.0.0.1:6379); the Cluster (3
//! primaries, 3 replicas) and the Sentinel set (a primary, a replica, 3 sentinels) are
//! private, started on free loopback ports the first time a case needs them and stopped
//! when this binary ends.

mod support;

use lock_redis::Variant;
use support::harness::Redis;

mod lua {
    use super::*;
    lock_conformance::suite!("redis-lua", Redis::new(Variant::Lua));
}

mod watch {
    use super::*;
    lock_conformance::suite!("redis-watch", Redis::new(Variant::Watch));
}

mod cluster_lua {
    use super::*;
    lock_conformance::suite!("redis-lua", Redis::cluster(Variant::Lua));
}

mod cluster_watch {
    use super::*;
    lock_conformance::suite!("redis-watch", Redis::cluster(Variant::Watch));
}

mod sentinel_lua {
    use super::*;
    lock_conformance::suite!("redis-lua", Redis::sentinel(Variant::Lua));
}

mod sentinel_watch {
    use super::*;
    lock_conformance::suite!("redis-watch", Redis::sentinel(Variant::Watch));
}

/// The mutex suite again on the WATCH variant, every lock one permit of a semaphore of 1
/// (a `v2` record): its shared holds keep the mutex's contract.
mod watch_as_semaphore {
    use super::*;
    lock_conformance::suite!(
        "redis-watch",
        lock_conformance::AsSemaphore(Redis::new(Variant::Watch))
    );
}

/// The same through the Lua script's shared path (`scripts/shared.lua`).
mod lua_as_semaphore {
    use super::*;
    lock_conformance::suite!(
        "redis-lua",
        lock_conformance::AsSemaphore(Redis::new(Variant::Lua))
    );
}
