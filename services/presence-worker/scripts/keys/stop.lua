-- keys/stop.lua: end one connection's entry (or all of a user's entries) in
-- a room in seed pattern 1 (store "keys"), atomically. Same contract and
-- outcomes as stop.lua.
--
-- KEYS[1] typist hash  KEYS[2] shown hash  KEYS[3] seq string (unused
-- without conn)  KEYS[4] throttle string  KEYS[5] room channel
-- ARGV[1] conn, '' = every connection of the user
-- ARGV[2] enc(user)  ARGV[3] seq (decimal, '0' = unordered)  ARGV[4] seq key PX ms
-- ARGV[5] typing_stop event JSON up to "ts_ms":
--
-- Returns {outcome, now_ms}: stale, stopped or noop (see stop.lua).
local conn, euser, seq = ARGV[1], ARGV[2], ARGV[3]

if conn ~= '' and seq_stale(KEYS[3], seq, ARGV[4]) then
  return {'stale', 0}
end

local now = now_ms()
-- Shown = receivers show the user: a start was published and no stop yet,
-- even if the typist's key has expired and no sweeper has pushed it.
local shown = redis.call('HEXISTS', KEYS[2], euser) == 1

if conn ~= '' then
  local all = redis.call('HGETALL', KEYS[1])
  local latest, mine = 0, false -- latest live expiry of the other connections
  for i = 1, #all, 2 do
    local e = tonumber(all[i + 1])
    if all[i] == conn then
      mine = true
    elseif e > now and e > latest then
      latest = e
    end
  end
  if latest > 0 then
    -- Another device of the user is still typing: drop this entry only,
    -- and let the key expire with the latest remaining one.
    if mine then
      redis.call('HDEL', KEYS[1], conn)
      redis.call('PEXPIREAT', KEYS[1], itoa(latest))
    end
    return {'noop', now}
  end
end

-- No live entry remains: clear the typist, its shown mark and throttle, so
-- the sweeper does not push a second (expired) stop.
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], euser)
redis.call('DEL', KEYS[4])
if not shown then
  return {'noop', now}
end
redis.call(PUBLISH, KEYS[5], ARGV[5] .. itoa(now) .. '}')
return {'stopped', now}
