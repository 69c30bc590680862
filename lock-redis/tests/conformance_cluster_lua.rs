//! The whole conformance suite on a private Redis Cluster (3 primaries, 3 replicas), Lua variant, multi-process cases included.

mod support;

use lock_redis::Variant;
use support::harness::Redis;

lock_conformance::suite!("redis-lua", Redis::cluster(Variant::Lua));
