local current = redis.call('HMGET', KEYS[1], 'rev', 'rec')
if not current[1] or not current[2] then
  return {0, ''}
end
if current[1] ~= ARGV[1] then
  return {2, current[2]}
end
redis.call('HSET', KEYS[1], 'rev', ARGV[2], 'rec', ARGV[3])
local tag = redis.call('HGET', KEYS[3], ARGV[5])
if tag then
  -- The owner's bytes take the change in the record's size (a record stored
  -- before sizes were kept counts from its first write).
  local size = string.len(ARGV[3])
  local before = tonumber(redis.call('HGET', KEYS[4], ARGV[5]) or '0')
  redis.call('HSET', KEYS[4], ARGV[5], size)
  if redis.call('HINCRBY', KEYS[5], tag, size - before) <= 0 then
    redis.call('HDEL', KEYS[5], tag)
  end
end
if ARGV[4] ~= '' then
  local now = clock(ARGV[9])
  redis.call('ZADD', KEYS[2], now, ARGV[5])
  if tag then
    redis.call('ZADD', ARGV[8] .. tag, now, ARGV[5])
  end
end
redis.call('XADD', ARGV[6], 'MAXLEN', '~', '{maxlen}', '*', 'c', ARGV[7])
return {1, ''}
