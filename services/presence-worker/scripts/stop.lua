-- stop.lua: end one connection's entry (or all of a user's entries) in a
-- room, atomically: typing_stop, leave, and each room of a disconnect.
--
-- KEYS[1] room sorted set  KEYS[2] names hash  KEYS[3] seq string (unused
-- without conn)  KEYS[4] throttle string  KEYS[5] room channel
-- ARGV[1] member enc(user):conn, '' = every connection of the user
-- ARGV[2] enc(user)  ARGV[3] seq (decimal, '0' = unordered)  ARGV[4] seq key PX ms
-- ARGV[5] typing_stop event JSON up to "ts_ms":
--
-- Returns {outcome, now_ms}; outcome is
--   stale    seq not above the connection's last applied seq: nothing changed
--   stopped  the user had entries (shown to receivers) and has no live one
--            left: the user's entries, name and throttle are removed and
--            typing_stop is published
--   noop     nothing visible changed (no entry, or another connection of the
--            user is still typing)
local member, euser, seq = ARGV[1], ARGV[2], ARGV[3]

if member ~= '' and seq_stale(KEYS[3], seq, ARGV[4]) then
  return {'stale', 0}
end

local now = now_ms()
local live, members, scores = user_members(KEYS[1], euser .. ':', now)
-- Shown = the user has any entry, live or expired but not yet swept: no
-- typing_stop has been pushed for it yet, so receivers still show the user.
local shown = #members > 0

if member ~= '' then
  local s = scores[member]
  if s and s > now then live = live - 1 end
  if live > 0 then
    -- Another device of the user is still typing: drop this entry only.
    if s then redis.call('ZREM', KEYS[1], member) end
    return {'noop', now}
  end
end

-- No live entry remains: clear the user's leftovers so the sweeper does not
-- push a second (expired) stop for them.
zrem_all(KEYS[1], members)
redis.call('HDEL', KEYS[2], euser)
redis.call('DEL', KEYS[4])
if not shown then
  return {'noop', now}
end
redis.call(PUBLISH, KEYS[5], ARGV[5] .. itoa(now) .. '}')
return {'stopped', now}
