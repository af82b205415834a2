local found = {}
local now = optional_now(ARGV[2])
for i = 3, #KEYS do
  found[i - 2] = visible(KEYS[i], ARGV[i], ARGV[1], now, KEYS[1], KEYS[2]) and 1 or 0
end
return found
