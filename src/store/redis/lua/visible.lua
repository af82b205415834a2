local function visible(key, id, scope, now, owners, expiry)
  if redis.call('EXISTS', key) ~= 1 then
    return false
  end
  if scope ~= '' then
    local own = redis.call('HGET', key, 'own')
    if not own then
      own = redis.call('HGET', owners, id)
    end
    if own ~= scope then
      return false
    end
  end
  if now then
    local expires = redis.call('ZSCORE', expiry, id)
    if expires and tonumber(expires) <= now then
      return false
    end
  end
  return true
end
local function optional_now(arg)
  if arg == '' then
    return nil
  end
  return tonumber(arg)
end
