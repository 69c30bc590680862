-- Every operation of the lock contract, one round trip each (EVALSHA of this script).
--
-- KEYS[1]  the record, a hash:  st (held|cooling), tok, holder (JSON), fen, holds,
--          exp and forget (server ms: expiry and end of the grace period), until (cooling)
-- KEYS[2]  the fencing counter, a string that outlives the record
-- KEYS[3]  the release channel (PUBLISHed on every release that frees the lock)
-- ARGV[1]  the operation: obtain | prolong | release | inspect | force
--
-- All keys of one lock share a {hash tag}, so the script runs on Redis Cluster too.
-- Time is the server's TIME, never a client's clock.

local rec, fence, channel = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- Integers stay exact below 2^53 (server microseconds are ~2^51); print them without exponent.
local function fmt(n) return string.format('%.0f', n) end

local kind = redis.call('TYPE', rec).ok
if kind ~= 'hash' and kind ~= 'none' then
  return redis.error_reply('CORRUPT ' .. rec .. ' holds a ' .. kind .. ', not a lock record')
end

local r = nil
if kind == 'hash' then
  local f = redis.call('HMGET', rec, 'st', 'tok', 'holder', 'fen', 'holds', 'exp', 'forget', 'until')
  r = { st = f[1], tok = f[2], holder = f[3], fen = tonumber(f[4]), holds = tonumber(f[5]),
        exp = tonumber(f[6]), forget = tonumber(f[7]), untl = tonumber(f[8]) }
  local held_ok = r.st == 'held' and r.tok and r.holder and r.fen and r.holds and r.exp and r.forget
  local cooling_ok = r.st == 'cooling' and r.untl
  if not (held_ok or cooling_ok) then
    return redis.error_reply('CORRUPT ' .. rec .. ' is a hash but not a lock record')
  end
end

-- free | cooling | live | expired, and whether `tok` holds it.
local function phase(tok)
  if not r then return 'free', false end
  if r.st == 'cooling' then
    if r.untl > now then return 'cooling', false end
    return 'free', false
  end
  if r.forget <= now then return 'free', false end
  local ours = tok ~= nil and r.tok == tok
  if r.exp > now then return 'live', ours end
  return 'expired', ours
end

local function set_expiry(ttl, grace)
  redis.call('HSET', rec, 'exp', fmt(now + ttl), 'forget', fmt(now + ttl + grace))
  redis.call('PEXPIRE', rec, ttl + grace)
end

local function state()
  local p = phase(nil)
  if p == 'cooling' then return { 'cooling', fmt(r.untl - now) } end
  if p == 'live' then return { 'held', fmt(r.exp - now), r.holder, fmt(r.fen), fmt(r.holds) } end
  return { 'free' }
end

-- Frees the lock, or starts its cooldown, and wakes waiters.
local function free(delay)
  redis.call('DEL', rec)
  if delay > 0 then
    redis.call('HSET', rec, 'st', 'cooling', 'until', fmt(now + delay))
    redis.call('PEXPIRE', rec, delay)
  end
  redis.call('PUBLISH', channel, 'released')
end

if op == 'obtain' then
  local tok, ttl, grace, holder = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
  local p, ours = phase(tok)
  if p == 'cooling' then return { 'busy', fmt(r.untl - now), '' } end
  if p == 'live' and not ours then return { 'busy', fmt(r.exp - now), r.holder } end
  if p == 'live' then
    local holds = redis.call('HINCRBY', rec, 'holds', 1)
    set_expiry(ttl, grace)
    return { 'reacquired', fmt(holds) }
  end
  -- Never below the server's clock in microseconds: fencing keeps growing after the counter
  -- is lost with a restart. The counter only orders acquisitions within one microsecond, so
  -- it may expire a day after the lock's last use.
  local f = redis.call('INCR', fence)
  if f < now_us then
    f = now_us
    redis.call('SET', fence, fmt(f))
  end
  redis.call('PEXPIRE', fence, ttl + grace + 86400000)
  redis.call('DEL', rec)
  redis.call('HSET', rec, 'st', 'held', 'tok', tok, 'holder', holder, 'fen', fmt(f), 'holds', '1')
  set_expiry(ttl, grace)
  return { 'acquired', fmt(f) }
elseif op == 'prolong' then
  local tok, ttl, grace = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  local p, ours = phase(tok)
  if not ours then return { 'lost' } end
  set_expiry(ttl, grace)
  if p == 'live' then return { 'prolonged' } end
  return { 'prolonged_late' }
elseif op == 'release' then
  local tok, delay = ARGV[2], tonumber(ARGV[3])
  local p, ours = phase(tok)
  if not ours then return { 'lost' } end
  if p == 'live' and r.holds > 1 then
    return { 'decremented', fmt(redis.call('HINCRBY', rec, 'holds', -1)) }
  end
  free(delay)
  if p == 'live' then return { 'released' } end
  return { 'released_late' }
elseif op == 'inspect' then
  return state()
elseif op == 'force' then
  local before = state()
  free(0)
  return before
end
return redis.error_reply('PROTOCOL unknown operation ' .. tostring(op))
