local removed = 0
local more = 0
local function sweep(set, bound)
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', bound, 'LIMIT', 0, ARGV[4])
  if #ids >= tonumber(ARGV[4]) then
    more = 1
  end
  for _, id in ipairs(ids) do
    if redis.call('ZREM', set, id) == 1 then
      drop(id, ARGV[3], KEYS[3], KEYS[4], ARGV[5], ARGV[6], ARGV[7], KEYS[5], KEYS[6])
      removed = removed + 1
    end
  end
end
local now = clock(ARGV[1])
sweep(KEYS[1], now)
sweep(KEYS[2], cutoff(now, ARGV[2]))
return {removed, more}
