if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('EXISTS', KEYS[1]) == 1 then
  return 'duplicate'
end
local now = clock(ARGV[10])
local retired_before = cutoff(now, ARGV[15])
local function full()
  if ARGV[8] ~= '' and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[8]) then
    return 'limit_rows'
  end
  if ARGV[9] ~= '' then
    local held = redis.call('HGET', KEYS[3], ARGV[2]) or '0'
    if tonumber(held) >= tonumber(ARGV[9]) then
      return 'limit_owner'
    end
  end
  return nil
end
-- Removes the records of `set` scored at most `bound`, up to one batch, and their
-- entries in the global index `global` (`drop` removes the owner's entries).
local function prune(set, global, bound)
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', bound, 'LIMIT', 0, ARGV[12])
  for _, id in ipairs(ids) do
    redis.call('ZREM', set, id)
    redis.call('ZREM', global, id)
    drop(id, ARGV[11], KEYS[2], KEYS[3], ARGV[16], ARGV[17], ARGV[18], KEYS[9], KEYS[10])
  end
end
local limit = full()
if limit == 'limit_rows' then
  prune(KEYS[4], KEYS[4], now)
  if retired_before then
    prune(KEYS[5], KEYS[5], retired_before)
  end
  limit = full()
end
if limit == 'limit_owner' then
  prune(KEYS[6], KEYS[4], now)
  if retired_before then
    prune(KEYS[7], KEYS[5], retired_before)
  end
  limit = full()
end
if limit then
  return limit
end
redis.call('HSET', KEYS[1], 'rev', ARGV[3], 'rec', ARGV[4], 'own', ARGV[2])
if ARGV[5] ~= '' then
  local expires = now + tonumber(ARGV[5])
  redis.call('ZADD', KEYS[4], expires, ARGV[1])
  redis.call('ZADD', KEYS[6], expires, ARGV[1])
  if ARGV[6] ~= '' then
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
  end
elseif ARGV[7] ~= '' then
  redis.call('ZADD', KEYS[5], now, ARGV[1])
  redis.call('ZADD', KEYS[7], now, ARGV[1])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
-- The record's size, kept until it is dropped, and its owner's bytes.
redis.call('HSET', KEYS[9], ARGV[1], string.len(ARGV[4]))
redis.call('HINCRBY', KEYS[10], ARGV[2], string.len(ARGV[4]))
redis.call('ZADD', KEYS[8], ARGV[19], listed(ARGV[1]))
redis.call('XADD', ARGV[13], 'MAXLEN', '~', '{maxlen}', '*', 'c', ARGV[14])
return 'ok'
