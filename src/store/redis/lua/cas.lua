local current = redis.call('HMGET', KEYS[1], 'rev', 'rec')
if not current[1] or not current[2] then
  return {0, ''}
end
if current[1] ~= ARGV[1] then
  return {2, current[2]}
end
redis.call('HSET', KEYS[1], 'rev', ARGV[2], 'rec', ARGV[3])
if ARGV[4] ~= '' then
  local now = clock(ARGV[9])
  redis.call('ZADD', KEYS[2], now, ARGV[5])
  local tag = redis.call('HGET', KEYS[3], ARGV[5])
  if tag then
    redis.call('ZADD', ARGV[8] .. tag, now, ARGV[5])
  end
end
redis.call('XADD', ARGV[6], 'MAXLEN', '~', '{maxlen}', '*', 'c', ARGV[7])
return {1, ''}
