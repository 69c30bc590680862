-- Shared holds (semaphores, read locks) and a waiting writer's marker: the second half of
-- lock.lua, spliced into it where it says so (lua.rs), and run only for a `v2` record or a
-- shared obtain; the mutex on a `v1` record never comes here. It sees lock.lua's locals
-- (rec, channel, op, now, t, fmt, FREE_KEEP, raw, and the v1 record's fields).
--
-- The decisions are lock-core's `rules` (rules.rs for a key held exclusively, rules/shared.rs
-- for shared holds), in the same order and with the same names where Lua allows; the
-- decision table (lock_conformance::table) and the conformance suite hold this script and
-- those functions to the same outcomes.
--
-- The record, `v2|` then JSON (record.rs writes and reads the same):
--   {"fencing":F,"state":"free"}
--   {"fencing":F,"state":"cooling","until":U}
--   {"fencing":F,"state":"held","hold":H}
--   {"fencing":F,"state":"shared","capacity":C,"holds":[S, ...]}   at least one S
--   each of them with "writer":{"token":T,"until":U} while a writer waits
-- where H = {"token","holder","holds","expires","forget"}, S = H plus "fencing","weight";
-- times in server ms, tokens the hex digest, the holder info a JSON string. A record with
-- neither shared holds nor a marker is written `v1`, for lock.lua's fast path.
--
-- ARGV of an obtain after lock.lua's five: 'exclusive' | 'queue' (exclusive, and the caller
-- waits: it may leave a writer's marker) | 'shared' followed by the capacity and the weight
-- | 'upgrade' followed by the fencing token of the caller's share it turns exclusive. A
-- 'shared' obtain may carry a fourth: the fencing token of the caller's exclusive hold it
-- turns shared (a downgrade). Either mode change answers {'lost'}, and writes nothing,
-- unless the caller's token holds that live hold.
--
-- Replies beyond lock.lua's:
--   {'busy', remaining, holder or '', reason, holders}
--        reason: held | shared | full | writer_waiting | cooling
--   {'refused', 'capacity', stored, asked} | {'refused', 'weight', stored, asked}
--   {'refused', 'mode', 'exclusive'} | {'refused', 'mode', capacity, weight}
--        (a mode change of a hold taken more than once)
--   {'shared', capacity, writer's remaining marker or '', then for every live hold:
--        holder, fencing, remaining, holds, weight}

local U32 = 4294967295
-- The largest number a record may hold: 16 digits, as in v1 (record.rs checks the same).
local MAX = 9999999999999999

local function int(n, max)
  return type(n) == 'number' and n >= 0 and n <= (max or MAX) and n == math.floor(n)
end
local function hex(s) return type(s) == 'string' and string.find(s, '^%x*$') ~= nil end
local function hold_ok(h)
  return type(h) == 'table' and hex(h.token) and type(h.holder) == 'string'
    and int(h.holds, U32) and int(h.expires) and int(h.forget)
end
local function array(a)
  if type(a) ~= 'table' then return false end
  local n = 0
  for _ in pairs(a) do n = n + 1 end
  return n == #a
end
local function valid(r)
  if type(r) ~= 'table' or not int(r.fencing) then return false end
  if r.writer == cjson.null then r.writer = nil end
  if r.writer ~= nil and not (type(r.writer) == 'table' and hex(r.writer.token)
      and int(r.writer['until'])) then
    return false
  end
  if r.state == 'free' then return true end
  if r.state == 'cooling' then return int(r['until']) end
  if r.state == 'held' then return hold_ok(r.hold) end
  if r.state ~= 'shared' or not int(r.capacity, U32) or not array(r.holds)
     or #r.holds == 0 then
    return false
  end
  for _, s in ipairs(r.holds) do
    if not (hold_ok(s) and int(s.fencing) and int(s.weight, U32)) then return false end
  end
  return true
end

-- The stored record as a table (nil: none), whichever format it came in.
local R
if v2 then
  local ok, decoded = pcall(cjson.decode, string.sub(raw, 4))
  if not ok or not valid(decoded) then
    return redis.error_reply('CORRUPT ' .. rec .. ' is a string but not a lock record')
  end
  R = decoded
elseif raw then
  R = { fencing = fen, state = st }
  if st == 'cooling' then R['until'] = math.min(exp, forget)
  elseif st == 'held' then
    R.hold = { token = tok, holder = holder, holds = holds, expires = exp, forget = forget }
  end
end

-- Where the record stands now: free, cooling, live, expired (held exclusively) or shared.
local P = 'free'
if R then
  if R.state == 'cooling' then
    if R['until'] > now then P = 'cooling' end
  elseif R.state == 'held' then
    if R.hold.expires > now then P = 'live'
    elseif R.hold.forget > now then P = 'expired' end
  elseif R.state == 'shared' then
    for _, s in ipairs(R.holds) do
      if s.forget > now then P = 'shared' end
    end
  end
end
-- The live writer's marker, and its owner.
local W = R and R.writer
if W and W['until'] <= now then W = nil end
local function other_writer(token)
  if W and W.token ~= token then return W end
  return nil
end
local last = R and R.fencing or 0

local function live_holds()
  local live = {}
  for _, s in ipairs(R.holds) do
    if s.expires > now then live[#live + 1] = s end
  end
  return live
end
local function own_share(token)
  for _, s in ipairs(R.holds) do
    if s.token == token and s.forget > now then return s end
  end
  return nil
end
local function renewed(h, ttl, grace)
  local c = {}
  for k, v in pairs(h) do c[k] = v end
  c.expires, c.forget = now + ttl, now + ttl + grace
  return c
end

local function hold_json(h)
  return string.format('"token":"%s","holder":%s,"holds":%d,"expires":%d,"forget":%d',
    h.token, cjson.encode(h.holder), h.holds, h.expires, h.forget)
end
local function encode(r)
  if not r.writer and r.state ~= 'shared' then
    if r.state == 'free' then return string.format('v1|free||%d|0|%d|%d|', r.fencing, now, now) end
    if r.state == 'cooling' then
      return string.format('v1|cooling||%d|0|%d|%d|', r.fencing, r['until'], r['until'])
    end
    local h = r.hold
    return string.format('v1|held|%s|%d|%d|%d|%d|%s', h.token, r.fencing, h.holds, h.expires,
      h.forget, h.holder)
  end
  local body
  if r.state == 'free' then body = '"state":"free"'
  elseif r.state == 'cooling' then body = string.format('"state":"cooling","until":%d', r['until'])
  elseif r.state == 'held' then body = '"state":"held","hold":{' .. hold_json(r.hold) .. '}'
  else
    local parts = {}
    for i, s in ipairs(r.holds) do
      parts[i] = string.format('{%s,"fencing":%d,"weight":%d}', hold_json(s), s.fencing, s.weight)
    end
    body = string.format('"state":"shared","capacity":%d,"holds":[%s]', r.capacity,
      table.concat(parts, ','))
  end
  local marker = ''
  if r.writer then
    marker = string.format(',"writer":{"token":"%s","until":%d}', r.writer.token, r.writer['until'])
  end
  return string.format('v2|{"fencing":%d,%s%s}', r.fencing, body, marker)
end

-- How long the key is kept: to the end of the state (record.rs's keep_ms), and at least to
-- the end of a writer's marker.
local function keep(r)
  local ms = FREE_KEEP
  if r.state == 'cooling' then ms = math.max(r['until'] - now, 1)
  elseif r.state == 'held' then ms = math.max(r.hold.forget - now, 1)
  elseif r.state == 'shared' then
    local forget = now
    for _, s in ipairs(r.holds) do forget = math.max(forget, s.forget) end
    ms = math.max(forget - now, 1)
  end
  if r.writer then ms = math.max(ms, r.writer['until'] - now) end
  return ms
end

-- Writes `r`, then wakes one waiter ('released') or all of them ('all'), or nobody (nil).
local function put(r, wake)
  redis.call('SET', rec, encode(r), 'PX', keep(r))
  if wake then redis.call('PUBLISH', channel, wake) end
end

local function busy(at, h, reason, holders)
  return { 'busy', fmt(math.max(at - now, 0)), h and h.holder or '', reason, fmt(holders) }
end

-- A released key: free, or cooling for `delay` ms, keeping the fencing token.
local function freed(delay, writer)
  if delay > 0 then
    return { fencing = last, state = 'cooling', ['until'] = now + delay, writer = writer }
  end
  return { fencing = last, state = 'free', writer = writer }
end

-- A release by a token that holds nothing: Lost; its own marker, if it left one, goes.
local function give_up_waiting(me)
  if W and W.token == me then
    R.writer = nil
    put(R, 'all')
  end
  return { 'lost' }
end

local function view()
  if P == 'cooling' then return { 'cooling', fmt(R['until'] - now) } end
  if P == 'live' then
    local h = R.hold
    return { 'held', fmt(h.expires - now), h.holder, fmt(last), fmt(h.holds) }
  end
  if P == 'shared' then
    local live = live_holds()
    if #live > 0 then
      local out = { 'shared', fmt(R.capacity), W and fmt(W['until'] - now) or '' }
      for _, s in ipairs(live) do
        out[#out + 1] = s.holder
        out[#out + 1] = fmt(s.fencing)
        out[#out + 1] = fmt(s.expires - now)
        out[#out + 1] = fmt(s.holds)
        out[#out + 1] = fmt(s.weight)
      end
      return out
    end
  end
  return { 'free' }
end

if op == 'obtain' then
  local me, ttl, grace, info = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
  local kind = ARGV[6]
  local next_fencing = math.max(last + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  -- A mode change changes the caller's own live hold in the other mode, the one with the
  -- fencing token it names, or nothing (rules.rs, changes_a_live_hold).
  local change = (kind == 'upgrade' and ARGV[7]) or (kind == 'shared' and ARGV[9]) or ''
  if change ~= '' then
    local f, found = tonumber(change), false
    if kind == 'upgrade' and P == 'shared' then
      for _, s in ipairs(live_holds()) do
        if s.token == me and s.fencing == f then found = true end
      end
    elseif kind == 'shared' and P == 'live' then
      found = R.hold.token == me and last == f
    end
    if not found then return { 'lost' } end
  end
  if P == 'cooling' then return busy(R['until'], nil, 'cooling', 0) end

  if kind ~= 'shared' then
    if P == 'live' then
      local h = R.hold
      if h.token ~= me then return busy(h.expires, h, 'held', 1) end
      local again = renewed(h, ttl, grace)
      again.holds = math.min(h.holds + 1, U32)
      put({ fencing = last, state = 'held', hold = again, writer = W })
      return { 'reacquired', fmt(again.holds) }
    end
    if P == 'shared' then
      -- The caller's own live share, if any, is upgraded once nobody else holds on.
      local others = {}
      for _, s in ipairs(live_holds()) do
        if s.token ~= me then others[#others + 1] = s
        -- An upgrade of a share taken more than once: the reentrant holds go first.
        elseif s.holds > 1 then return { 'refused', 'mode', fmt(R.capacity), fmt(s.weight) }
        end
      end
      if #others > 0 then
        local ends = others[1]
        for _, s in ipairs(others) do
          if s.expires >= ends.expires then ends = s end
        end
        -- Busy because of shared holds: a waiting writer keeps new ones out.
        if kind == 'queue' and not other_writer(me) then
          R.writer = { token = me, ['until'] = now + ttl }
          put(R)
        end
        return busy(ends.expires, ends, 'shared', #others)
      end
    end
    put({ fencing = next_fencing, state = 'held', writer = other_writer(me),
          hold = { token = me, holder = info, holds = 1, expires = now + ttl,
                   forget = now + ttl + grace } })
    return { 'acquired', fmt(next_fencing) }
  end

  local capacity, weight = tonumber(ARGV[7]), tonumber(ARGV[8])
  local writer = other_writer(me)
  -- A new share for the caller. The live holds stay; expired ones (the caller's own aside)
  -- stay, oldest first, while they fit beside the live ones and the new one.
  local function admit(before)
    local used, kept = weight, {}
    for _, s in ipairs(before) do
      if s.forget > now and s.token ~= me and s.expires > now then used = used + s.weight end
    end
    for _, s in ipairs(before) do
      if s.forget > now and s.token ~= me then
        if s.expires > now then kept[#kept + 1] = s
        elseif used + s.weight <= capacity then
          used = used + s.weight
          kept[#kept + 1] = s
        end
      end
    end
    kept[#kept + 1] = { token = me, holder = info, holds = 1, expires = now + ttl,
                        forget = now + ttl + grace, fencing = next_fencing, weight = weight }
    put({ fencing = next_fencing, state = 'shared', capacity = capacity, holds = kept,
          writer = writer }, 'released')
    return { 'acquired', fmt(next_fencing) }
  end

  if P == 'live' then
    if R.hold.token ~= me then return busy(R.hold.expires, R.hold, 'held', 1) end
    -- A downgrade (of a hold taken once): the fencing token kept, the ttl reset, the first
    -- shared hold (it fixes the capacity), and every waiter woken.
    if R.hold.holds > 1 then return { 'refused', 'mode', 'exclusive' } end
    local share = renewed(R.hold, ttl, grace)
    share.fencing, share.weight = last, weight
    put({ fencing = last, state = 'shared', capacity = capacity, holds = { share },
          writer = W }, 'all')
    return { 'acquired', fmt(last) }
  end
  if P ~= 'shared' then
    if writer then return busy(writer['until'], nil, 'writer_waiting', 0) end
    return admit({})
  end
  if R.capacity ~= capacity then
    return { 'refused', 'capacity', fmt(R.capacity), fmt(capacity) }
  end
  local live = live_holds()
  for _, s in ipairs(live) do
    if s.token == me then
      if s.weight ~= weight then return { 'refused', 'weight', fmt(s.weight), fmt(weight) } end
      local n
      for i, x in ipairs(R.holds) do
        if x.token == me then
          R.holds[i] = renewed(x, ttl, grace)
          n = math.min(x.holds + 1, U32)
          R.holds[i].holds = n
        end
      end
      R.writer = W
      put(R)
      return { 'reacquired', fmt(n) }
    end
  end
  if writer then return busy(writer['until'], nil, 'writer_waiting', #live) end
  local used = 0
  for _, s in ipairs(live) do used = used + s.weight end
  if used + weight <= capacity then return admit(R.holds) end
  -- Full: the hold whose end, with those ending before it, makes room (ties in admission
  -- order, as Rust's stable sort).
  local order = {}
  for i, s in ipairs(live) do order[i] = { s = s, i = i } end
  table.sort(order, function(a, b)
    if a.s.expires ~= b.s.expires then return a.s.expires < b.s.expires end
    return a.i < b.i
  end)
  local opener
  for _, o in ipairs(order) do
    used = used - o.s.weight
    if used + weight <= capacity then opener = o.s break end
  end
  return busy(opener and opener.expires or now, opener, 'full', #live)
end

local me = ARGV[2]
if op == 'prolong' then
  local ttl, grace = tonumber(ARGV[3]), tonumber(ARGV[4])
  if (P == 'live' or P == 'expired') and R.hold.token == me then
    put({ fencing = last, state = 'held', hold = renewed(R.hold, ttl, grace), writer = W })
    if P == 'live' then return { 'prolonged' } end
    return { 'prolonged_late' }
  end
  local own = P == 'shared' and own_share(me)
  if not own then return { 'lost' } end
  local kept = {}
  for _, s in ipairs(R.holds) do
    if s.token == me then kept[#kept + 1] = renewed(s, ttl, grace)
    elseif s.forget > now then kept[#kept + 1] = s end
  end
  put({ fencing = last, state = 'shared', capacity = R.capacity, holds = kept, writer = W })
  if own.expires > now then return { 'prolonged' } end
  return { 'prolonged_late' }
elseif op == 'release' then
  local delay = tonumber(ARGV[3])
  if (P == 'live' or P == 'expired') and R.hold.token == me then
    local h = R.hold
    if P == 'live' and h.holds > 1 then
      h.holds = h.holds - 1
      put({ fencing = last, state = 'held', hold = h, writer = W })
      return { 'decremented', fmt(h.holds) }
    end
    local writer = other_writer(me)
    put(freed(delay, writer), writer and 'all' or 'released')
    if P == 'live' then return { 'released' } end
    return { 'released_late' }
  end
  local own = P == 'shared' and own_share(me)
  if not own then return give_up_waiting(me) end
  local live = own.expires > now
  if live and own.holds > 1 then
    local n = own.holds - 1
    for _, s in ipairs(R.holds) do
      if s.token == me then s.holds = n end
    end
    R.writer = W
    put(R)
    return { 'decremented', fmt(n) }
  end
  local rest, any_live = {}, false
  for _, s in ipairs(R.holds) do
    if s.token ~= me and s.forget > now then
      rest[#rest + 1] = s
      any_live = any_live or s.expires > now
    end
  end
  local after
  if any_live or (delay == 0 and #rest > 0) then
    after = { fencing = last, state = 'shared', capacity = R.capacity, holds = rest }
  else
    after = freed(delay)
  end
  local w = other_writer(me)
  after.writer = w
  -- A writer waits and another's share lives on: nobody can get in (the marker keeps
  -- readers out, the share the writer), so nobody is woken. The last share out wakes all.
  local wake = 'all'
  if w then
    for _, s in ipairs(rest) do
      if s.expires > now and s.token ~= w.token then wake = nil end
    end
  end
  put(after, wake)
  if live then return { 'released' } end
  return { 'released_late' }
elseif op == 'inspect' then
  return view()
elseif op == 'force' then
  local before = view()
  if R then put(freed(0), 'all') end
  return before
end
return redis.error_reply('PROTOCOL unknown operation ' .. tostring(op))
