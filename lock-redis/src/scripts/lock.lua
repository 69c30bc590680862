-- Every operation of the lock contract, one round trip each (EVALSHA of this script).
--
-- KEYS[1]  the record, a string:  v1|<state>|<token>|<fencing>|<holds>|<expires>|<forget>|<holder>
--            state    held | cooling | free
--            token    the holder's token (hex), empty unless held
--            fencing  the key's last fencing token
--            holds    the reentrant hold count (0 unless held)
--            expires  server ms: end of the ttl (held) or of the cooldown (cooling)
--            forget   server ms: end of the grace period; after it the record counts as free
--            holder   the holder's info as JSON, empty unless held (last: it may hold '|')
--          A released record stays a while as 'free' only to remember its fencing token.
-- KEYS[2]  the release channel (PUBLISHed on every release that frees the lock)
-- ARGV[1]  the operation: obtain | prolong | release | inspect | force
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
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- Integers stay exact below 2^53 (server microseconds are ~2^51); '%d' prints them whole
-- (Lua's %d is a C long: 64 bits on the 64-bit servers Redis runs on).
local function fmt(n) return string.format('%d', n) end

local raw = redis.pcall('GET', rec)
if type(raw) == 'table' and raw.err then
  return redis.error_reply('CORRUPT ' .. rec .. ' holds something else than a lock record')
end
local r = nil
if raw then
  local st, tok, fen, holds, exp, forget, holder =
    string.match(raw, '^v1|(%l+)|(%x*)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  -- Numbers of at most 16 digits stay exact in Lua's doubles; holds fit a u32. The WATCH
  -- variant's decoder (record.rs) applies the same rules.
  if not st or (st ~= 'held' and st ~= 'cooling' and st ~= 'free')
     or #fen > 16 or #exp > 16 or #forget > 16 or #holds > 10
     or tonumber(holds) > 4294967295 then
    return redis.error_reply('CORRUPT ' .. rec .. ' is a string but not a lock record')
  end
  r = { st = st, tok = tok, fen = tonumber(fen), holds = tonumber(holds), exp = tonumber(exp),
        forget = tonumber(forget), holder = holder }
end

-- free | cooling | live | expired, and whether `tok` holds it.
local function phase(tok)
  if not r or r.st == 'free' or r.forget <= now then return 'free', false end
  if r.st == 'cooling' then return 'cooling', false end
  local ours = tok ~= nil and r.tok == tok
  if r.exp > now then return 'live', ours end
  return 'expired', ours
end

-- Writes the record (one string.format: the cheapest way to build it in Redis's Lua);
-- `px` nil keeps the key's physical expiry.
local function put(st, tok, fen, holds, exp, forget, holder, px)
  local value = string.format('v1|%s|%s|%d|%d|%d|%d|%s', st, tok, fen, holds, exp, forget, holder)
  if px then
    redis.call('SET', rec, value, 'PX', px)
  else
    redis.call('SET', rec, value, 'KEEPTTL')
  end
end

local function state()
  local p = phase(nil)
  if p == 'cooling' then return { 'cooling', fmt(r.exp - now) } end
  if p == 'live' then return { 'held', fmt(r.exp - now), r.holder, fmt(r.fen), fmt(r.holds) } end
  return { 'free' }
end

-- Frees the lock, or starts its cooldown, keeping the fencing token; wakes waiters.
local function free(delay)
  local fen = r and r.fen or 0
  if delay > 0 then
    put('cooling', '', fen, 0, now + delay, now + delay, '', delay)
  else
    put('free', '', fen, 0, now, now, '', FREE_KEEP)
  end
  redis.call('PUBLISH', channel, 'released')
end

if op == 'obtain' then
  local tok, ttl, grace, holder = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
  local p, ours = phase(tok)
  if p == 'cooling' then return { 'busy', fmt(r.exp - now), '' } end
  if p == 'live' and not ours then return { 'busy', fmt(r.exp - now), r.holder } end
  if p == 'live' then
    put('held', tok, r.fen, r.holds + 1, now + ttl, now + ttl + grace, r.holder, ttl + grace)
    return { 'reacquired', fmt(r.holds + 1) }
  end
  -- Above the key's last token, and never below the server's clock in microseconds: tokens
  -- keep growing after the record is gone, even with a restart that lost every key.
  local f = math.max((r and r.fen or 0) + 1, now_us)
  put('held', tok, f, 1, now + ttl, now + ttl + grace, holder, ttl + grace)
  return { 'acquired', fmt(f) }
elseif op == 'prolong' then
  local tok, ttl, grace = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  local p, ours = phase(tok)
  if not ours then return { 'lost' } end
  put('held', tok, r.fen, r.holds, now + ttl, now + ttl + grace, r.holder, ttl + grace)
  if p == 'live' then return { 'prolonged' } end
  return { 'prolonged_late' }
elseif op == 'release' then
  local tok, delay = ARGV[2], tonumber(ARGV[3])
  local p, ours = phase(tok)
  if not ours then return { 'lost' } end
  if p == 'live' and r.holds > 1 then
    put('held', tok, r.fen, r.holds - 1, r.exp, r.forget, r.holder, nil)
    return { 'decremented', fmt(r.holds - 1) }
  end
  free(delay)
  if p == 'live' then return { 'released' } end
  return { 'released_late' }
elseif op == 'inspect' then
  return state()
elseif op == 'force' then
  local before = state()
  if r then free(0) end
  return before
end
return redis.error_reply('PROTOCOL unknown operation ' .. tostring(op))
