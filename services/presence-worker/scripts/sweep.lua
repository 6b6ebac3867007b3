-- sweep.lua: push typing_stop(expired) for the entries of one room whose
-- time ran out, atomically, and report when the room is next due. Any
-- number of workers may sweep the same room: the first run removes the
-- expired entries, later runs find none, so each expired typist yields
-- exactly one stop.
--
-- KEYS[1] room sorted set  KEYS[2] names hash  KEYS[3] room channel
-- ARGV[1] throttle key prefix of the room, throttle:typing:{R}: (+ enc(user))
-- ARGV[2] typing_stop JSON up to and including "user":
-- ARGV[3] the rest up to and including "ts_ms": (',"reason":"expired","ts_ms":')
--
-- Returns {stops_published, entries_removed, now_ms, next_due_ms}; next_due_ms
-- is the room's earliest remaining expiry, -1 when none is left (the worker
-- then reschedules the room in its sweep bucket: reschedule.lua).
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', itoa(now))
local stops = 0
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', itoa(now))
  local seen, users = {}, {}
  for _, m in ipairs(expired) do
    local u = user_of(m)
    if u and not seen[u] then
      seen[u] = true
      users[#users + 1] = u
    end
  end
  -- Users with a live entry left (another connection, or a new start after
  -- the expiry) are still visible: no stop for them.
  local alive = {}
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local u = user_of(m)
    if u then alive[u] = true end
  end
  for _, u in ipairs(users) do
    if not alive[u] then
      redis.call('HDEL', KEYS[2], u)
      redis.call('DEL', ARGV[1] .. u)
      redis.call(PUBLISH, KEYS[3], ARGV[2] .. json_str(pct_dec(u)) .. ARGV[3] .. itoa(now) .. '}')
      stops = stops + 1
    end
  end
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_due = -1
if #first > 0 then next_due = tonumber(first[2]) end
return {stops, #expired, now, next_due}
