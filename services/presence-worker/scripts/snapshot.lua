-- snapshot.lua: who is typing in a room now (read only).
--
-- KEYS[1] room sorted set  KEYS[2] names hash
--
-- Returns {enc(user)1, name1, enc(user)2, name2, ...}: the distinct users
-- with a live entry (score > now), each once, name '' when none is known.
local now = now_ms()
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. itoa(now), '+inf')
local seen, out = {}, {}
for _, m in ipairs(live) do
  local u = user_of(m)
  if u and not seen[u] then
    seen[u] = true
    out[#out + 1] = u
    out[#out + 1] = redis.call('HGET', KEYS[2], u) or ''
  end
end
return out
