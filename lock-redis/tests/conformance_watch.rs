//! The whole conformance suite on Redis, WATCH/MULTI variant, multi-process cases included.

mod support;

use lock_redis::Variant;
use support::harness::Redis;

lock_conformance::suite!("redis-watch", Redis::new(Variant::Watch));
