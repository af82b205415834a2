local function drop(id, task_prefix, owners, counts, owner_expiry, owner_retired, owner_list, sizes, bytes)
  redis.call('DEL', task_prefix .. id)
  local size = redis.call('HGET', sizes, id)
  redis.call('HDEL', sizes, id)
  local tag = redis.call('HGET', owners, id)
  if tag then
    redis.call('HDEL', owners, id)
    if redis.call('HINCRBY', counts, tag, -1) <= 0 then
      redis.call('HDEL', counts, tag)
    end
    if size and redis.call('HINCRBY', bytes, tag, -tonumber(size)) <= 0 then
      redis.call('HDEL', bytes, tag)
    end
    redis.call('ZREM', owner_expiry .. tag, id)
    redis.call('ZREM', owner_retired .. tag, id)
    redis.call('ZREM', owner_list .. tag, listed(id))
  end
end
