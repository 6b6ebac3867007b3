-- snapshot.lua: who is typing in a room now (read only), in
-- O(limit + log N) of the room's typists N.
--
-- KEYS[1] users zset (start.lua)
-- ARGV[1] user hash key prefix of the room, typing:user:{R}: (+ enc(user))
-- ARGV[2] max users listed
--
-- Returns {total, enc(user)1, name1, enc(user)2, name2, ...}: total is the
-- number of users with a live entry (score > now); the users listed are the
-- ARGV[2] most recently active of them, name '' when none is known.
local now = now_ms()
local live = '(' .. itoa(now)
local total = redis.call('ZCOUNT', KEYS[1], live, '+inf')
local out = {total}
if tonumber(ARGV[2]) > 0 then
  for _, u in ipairs(redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', live, 'LIMIT', 0, tonumber(ARGV[2]))) do
    out[#out + 1] = u
    out[#out + 1] = redis.call('HGET', ARGV[1] .. u, 'n') or ''
  end
end
return out
