-- A fenced write (lock_redis::fence): SET a key only if the writer's fencing token is not
-- below the highest one that wrote to it, all in this one script, so that no newer write
-- comes between the check and the write.
--
-- KEYS[1]  the fence: the highest token that wrote, in decimal (no leading zeros)
-- KEYS[2]  the key written
-- ARGV[1]  the writer's token, in decimal (no leading zeros; the client formats it)
-- ARGV[2]  the value
--
-- Both keys share a hash slot (the client picks the fence's name so), so this runs on a
-- Redis Cluster too. Tokens are compared as decimal strings, exact for every u64 (Lua's
-- numbers are doubles, exact only below 2^53).

local fence, key, token, value = KEYS[1], KEYS[2], ARGV[1], ARGV[2]

-- Whether decimal `a` is below decimal `b`.
local function below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

local highest = redis.call('GET', fence)
if highest and not string.match(highest, '^%d+$') then
  return redis.error_reply('CORRUPT ' .. fence .. ' holds no fencing token')
end
if highest and below(token, highest) then
  return { 'stale', highest }
end
if highest ~= token then
  redis.call('SET', fence, token)
end
redis.call('SET', key, value)
return { 'ok' }
