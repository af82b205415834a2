-- A task's member in its owner's list: its id in base64url, each character
-- replaced by the one of the same value in an alphabet in byte order, so that
-- Redis (which orders members of one score by their bytes) orders them as the
-- ids' bytes are ordered. `unlisted` gives the id back.
local ID_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
local LIST_ALPHABET = '-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz'
local to_listed, to_id = {}, {}
for i = 1, 64 do
  local id_char, listed_char = ID_ALPHABET:sub(i, i), LIST_ALPHABET:sub(i, i)
  to_listed[id_char] = listed_char
  to_id[listed_char] = id_char
end
local function listed(id)
  return (string.gsub(id, '.', to_listed))
end
local function unlisted(member)
  return (string.gsub(member, '.', to_id))
end
