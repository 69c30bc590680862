"""Server CPU per EVALSHA of lock.lua versions, measured inside Redis.

Usage: python3 lua_server_cpu.py OLD.lua NEW.lua [...]   (pip install redis)

Each file is a complete script as lua.rs loads it ({free_keep_ms} filled in, shared.lua
spliced in where lock.lua says). A name ending in '+x' (e.g. new.lua+x) sends the obtain's
mode argument ('exclusive') that scripts since #25 take. For each script: 16 batches,
alternated with the others, of 200 rounds of 64 obtain+release pairs pipelined on the
server at 127.0.0.1:6379; prints the median and mean of INFO commandstats' usec_per_call
of EVALSHA over the batches.
"""
import sys

import redis

r = redis.Redis(host="127.0.0.1", port=6379)
names = sys.argv[1:]
shas = {n: r.script_load(open(n.split("+")[0]).read()) for n in names}
holder = '{"host":"bench-host","pid":12345}'


def run(name, rounds=200, batch=64):
    sha = shas[name]
    extra = ("exclusive",) if name.endswith("+x") else ()
    r.config_resetstat()
    for _ in range(rounds):
        p = r.pipeline(transaction=False)
        for j in range(batch):
            k = f"luacpu:{j}"
            keys = ("{" + k + "}r", "{" + k + "}c")
            p.evalsha(sha, 2, *keys, "obtain", "ab" * 32, 30000, 30000, holder, *extra)
            p.evalsha(sha, 2, *keys, "release", "ab" * 32, 0)
        p.execute()
    return r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"]


res = {n: [] for n in names}
for _ in range(16):
    for n in names:
        res[n].append(run(n))
for n, xs in res.items():
    xs.sort()
    print(f"{n}: median {xs[len(xs) // 2]:.2f} us, mean {sum(xs) / len(xs):.2f} us per EVALSHA")
