-- KEYS: the owner's list, owners, expiry. ARGV: owner tag, now ('' when the
-- server's native expiry decides), task key prefix, limit, and the page's
-- start: the created_at and id of the task it follows ('' '' for the first).
-- Answers {more, records}: up to `limit` visible records in list order, and 1
-- when a visible record follows them.
local list = KEYS[1]
local now = optional_now(ARGV[2])
local limit = tonumber(ARGV[4])

-- Whether `a` sorts before `b` byte by byte (Lua's own `<` follows the locale).
local function bytes_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- The rank, newest first, of the first task after (ARGV[5], ARGV[6]), whether
-- that task is still there or not: those created later come first, then those
-- created in the same millisecond with a larger id, found by bisection.
local start = 0
if ARGV[5] ~= '' then
  local member = listed(ARGV[6])
  start = redis.call('ZCOUNT', list, '(' .. ARGV[5], '+inf')
  local stop = start + redis.call('ZCOUNT', list, ARGV[5], ARGV[5])
  while start < stop do
    local middle = math.floor((start + stop) / 2)
    local there = redis.call('ZRANGE', list, middle, middle, 'REV')[1]
    if bytes_before(there, member) then
      stop = middle
    else
      start = middle + 1
    end
  end
end

local found = {}
local batch = math.min(limit + 1, 256)
while true do
  local members = redis.call('ZRANGE', list, start, start + batch - 1, 'REV')
  for _, member in ipairs(members) do
    local id = unlisted(member)
    local key = ARGV[3] .. id
    if visible(key, id, ARGV[1], now, KEYS[2], KEYS[3]) then
      if #found >= limit then
        return {1, found}
      end
      found[#found + 1] = redis.call('HGET', key, 'rec')
    end
  end
  if #members < batch then
    return {0, found}
  end
  start = start + batch
end
