//! The whole conformance suite on a private Redis Sentinel set (a primary, a replica, 3 sentinels), Lua variant, multi-process cases included.

mod support;

use lock_redis::Variant;
use support::harness::Redis;

lock_conformance::suite!("redis-lua", Redis::sentinel(Variant::Lua));
