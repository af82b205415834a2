local function clock(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function cutoff(now, retention)
  if retention == '' then
    return nil
  end
  return math.max(now - tonumber(retention), 0)
end
