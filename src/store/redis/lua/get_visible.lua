local found = {}
for i = 2, #KEYS do
  local own = redis.call('HGET', KEYS[i], 'own')
  if not own and redis.call('EXISTS', KEYS[i]) == 1 then
    own = redis.call('HGET', KEYS[1], ARGV[i])
  end
  if own == ARGV[1] then
    found[i - 1] = redis.call('HGET', KEYS[i], 'rec')
  else
    found[i - 1] = false
  end
end
return found
