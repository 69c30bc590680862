//! The whole conformance suite on Redis, Lua variant, multi-process cases included.

mod support;

use lock_redis::Variant;
use support::harness::Redis;

lock_conformance::suite!("redis-lua", Redis::new(Variant::Lua));
