-- due.lua: the rooms due for an expiry sweep, read against Redis TIME.
--
-- KEYS[1] sweep index (member enc(room), score = due unix ms)
-- ARGV[1] max rooms
--
-- Returns {now_ms, enc(room)1, due1, enc(room)2, due2, ...}, earliest first.
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', itoa(now), 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local out = {now}
for i = 1, #due do out[#out + 1] = due[i] end
return out
