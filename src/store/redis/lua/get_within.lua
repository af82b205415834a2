local now = optional_now(ARGV[2])
local budget = tonumber(ARGV[3])
local total = 0
local hits = {}
for i = 3, #KEYS do
  if visible(KEYS[i], ARGV[i + 1], ARGV[1], now, KEYS[1], KEYS[2]) then
    total = total + redis.call('HSTRLEN', KEYS[i], 'rec')
    if total > budget then
      return 'over'
    end
    hits[#hits + 1] = i
  end
end
local found = {}
for i = 3, #KEYS do
  found[i - 2] = false
end
for _, i in ipairs(hits) do
  found[i - 2] = redis.call('HGET', KEYS[i], 'rec')
end
return found
