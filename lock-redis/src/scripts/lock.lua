-- Every operation of the lock contract, one round trip each (EVALSHA of this script).
--
-- KEYS[1]  the record, a string:  v1|<state>|<token>|<fencing>|<holds>|<expires>|<forget>|<holder>
--            state    held | cooling | free
--            token    the SHA-256 of the holder's token (hex: `Token::digest`; the token
--                     itself never reaches the server), empty unless held
--            fencing  the key's last fencing token
--            holds    the reentrant hold count (0 unless held)
--            expires  server ms: end of the ttl (held) or of the cooldown (cooling)
--            forget   server ms: end of the grace period; after it the record counts as free
--            holder   the holder's info as JSON, empty unless held (last: it may hold '|')
--          A released record stays a while as 'free' only to remember its fencing token.
--          Shared holds and a waiting writer's marker need more: a `v2|` record, read and
--          written by shared.lua (below), whose header documents it.
-- KEYS[2]  the release channel (PUBLISHed on every release that frees the lock)
-- ARGV[1]  the operation: obtain | prolong | release | inspect | force
--          obtain:  token digest, ttl ms, grace ms, holder JSON, then 'exclusive' | 'queue' |
--                   'shared' capacity weight [fencing] | 'upgrade' fencing (see shared.lua)
--          prolong: token digest, ttl ms, grace ms;  release: token digest, delay ms (0: none)
--
-- Both keys share a {hash tag}, so the script runs on Redis Cluster too.
-- Time is the server's TIME, never a client's clock.

local rec, channel = KEYS[1], KEYS[2]
local op = ARGV[1]

-- How long a released record remembers its fencing token (ms; filled in from record.rs's
-- FREE_KEEP_MS when the script is loaded); the clock floor below keeps tokens growing after
-- that.
local FREE_KEEP = {free_keep_ms}

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Integers stay exact below 2^53 (server microseconds are ~2^51); '%d' prints them whole
-- (Lua's %d is a C long: 64 bits on the 64-bit servers Redis runs on). string.format is
-- also the cheapest way to build a record in Redis's Lua (cheaper than '..').
local function fmt(n) return string.format('%d', n) end

-- The stored record as plain locals (no table: this runs on every call), and its phase:
-- 'free' (no record, a free one, or one past its `forget`), 'cooling', 'live' or 'expired'.
local phase, st, tok, fen, holds, exp, forget, holder = 'free', nil, '', 0, 0, 0, 0, ''
local raw = redis.pcall('GET', rec)
local v2 = false
if raw then
  if type(raw) == 'table' then
    return redis.error_reply('CORRUPT ' .. rec .. ' holds something else than a lock record')
  end
  st, tok, fen, holds, exp, forget, holder =
    string.match(raw, '^v1|(%l+)|(%x*)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  if not st then
    v2 = string.sub(raw, 1, 3) == 'v2|'
  end
  -- Numbers of at most 16 digits stay exact in Lua's doubles; holds fit a u32. The WATCH
  -- variant's decoder (record.rs) applies the same rules.
  if not v2 and (not st or (st ~= 'held' and st ~= 'cooling' and st ~= 'free')
     or #fen > 16 or #exp > 16 or #forget > 16 or #holds > 10
     or tonumber(holds) > 4294967295) then
    return redis.error_reply('CORRUPT ' .. rec .. ' is a string but not a lock record')
  end
  if not v2 then
    fen, holds, exp, forget = tonumber(fen), tonumber(holds), tonumber(exp), tonumber(forget)
    if st == 'free' or forget <= now then phase = 'free'
    elseif st == 'cooling' then phase = 'cooling'
    elseif exp > now then phase = 'live'
    else phase = 'expired' end
  end
end

if v2 or (op == 'obtain' and (ARGV[6] == 'shared' or ARGV[6] == 'upgrade')) then
--{shared.lua}
end

-- The mutex on a v1 record (or none): the fast path, all the rest of this script. A waiting
-- writer's 'queue' changes nothing here: only shared holds, which v1 never has, make it
-- leave a marker.

-- Writes a held record; `px` nil keeps the key's physical expiry.
local function hold(token, fencing, n, ttl, grace, info)
  redis.call('SET', rec,
    string.format('v1|held|%s|%d|%d|%d|%d|%s', token, fencing, n, now + ttl, now + ttl + grace, info),
    'PX', ttl + grace)
end

local function state()
  if phase == 'cooling' then return { 'cooling', fmt(exp - now) } end
  if phase == 'live' then return { 'held', fmt(exp - now), holder, fmt(fen), fmt(holds) } end
  return { 'free' }
end

-- Frees the lock, or starts its cooldown, keeping the fencing token; wakes one waiter
-- ('released': a release) or all of them ('all': a forced release, rules::force).
local function free(delay, wake)
  if delay > 0 then
    redis.call('SET', rec, string.format('v1|cooling||%d|0|%d|%d|', fen, now + delay, now + delay),
      'PX', delay)
  else
    redis.call('SET', rec, string.format('v1|free||%d|0|%d|%d|', fen, now, now), 'PX', FREE_KEEP)
  end
  redis.call('PUBLISH', channel, wake)
end

if op == 'obtain' then
  local me, ttl, grace = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  if phase == 'cooling' then return { 'busy', fmt(exp - now), '' } end
  if phase == 'live' then
    if tok ~= me then return { 'busy', fmt(exp - now), holder } end
    hold(me, fen, holds + 1, ttl, grace, holder)
    return { 'reacquired', fmt(holds + 1) }
  end
  -- Above the key's last token, and never below the server's clock in microseconds: tokens
  -- keep growing after the record is gone, even with a restart that lost every key.
  local f = math.max(fen + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  hold(me, f, 1, ttl, grace, ARGV[5])
  return { 'acquired', fmt(f) }
end

-- Prolong and release need the caller's own hold, live or expired (but not forgotten).
local ours = (phase == 'live' or phase == 'expired') and tok == ARGV[2]
if op == 'prolong' then
  if not ours then return { 'lost' } end
  hold(tok, fen, holds, tonumber(ARGV[3]), tonumber(ARGV[4]), holder)
  if phase == 'live' then return { 'prolonged' } end
  return { 'prolonged_late' }
elseif op == 'release' then
  if not ours then return { 'lost' } end
  if phase == 'live' and holds > 1 then
    redis.call('SET', rec,
      string.format('v1|held|%s|%d|%d|%d|%d|%s', tok, fen, holds - 1, exp, forget, holder),
      'KEEPTTL')
    return { 'decremented', fmt(holds - 1) }
  end
  free(tonumber(ARGV[3]), 'released')
  if phase == 'live' then return { 'released' } end
  return { 'released_late' }
elseif op == 'inspect' then
  return state()
elseif op == 'force' then
  local before = state()
  if raw then free(0, 'all') end
  return before
end
return redis.error_reply('PROTOCOL unknown operation ' .. tostring(op))
