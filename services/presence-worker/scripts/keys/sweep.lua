-- keys/sweep.lua: push typing_stop(expired) for the typists of one room
-- whose time ran out in seed pattern 1 (store "keys"), atomically, and
-- report when the room is next due.
--
-- Pattern 1 alone cannot push expiry: Redis deletes an expired key without
-- telling anyone reliably (keyspace notifications are fire-and-forget and
-- late). So the room keeps a "shown" hash of the typists receivers show;
-- a shown typist whose key has no live entry left has expired. Checking
-- the shown typists' own keys costs O(typists in the room), where a SCAN
-- of the room's pattern would cost O(keyspace) per due room per tick.
-- Any number of workers may sweep the same room: the first run clears the
-- shown mark, later runs find none, so each expired typist yields one stop.
--
-- KEYS[1] shown hash  KEYS[2] room channel
-- ARGV[1] typist key prefix of the room, typing:{R}: (+ enc(user))
-- ARGV[2] throttle key prefix of the room, throttle:typing:{R}: (+ enc(user))
-- ARGV[3] typing_stop JSON up to and including "user":
-- ARGV[4] the rest up to and including "ts_ms": (',"reason":"expired","ts_ms":')
--
-- Returns {stops_published, entries_removed, now_ms, next_due_ms}
-- (next_due_ms as in sweep.lua: -1 when no typist is left); entries_removed
-- counts the expired connection entries pruned from live typists, plus one
-- per expired typist (Redis already deleted its key and entries).
local now = now_ms()
local stops, removed, due = 0, 0, nil
for _, u in ipairs(redis.call('HKEYS', KEYS[1])) do
  local key = ARGV[1] .. u
  local all = redis.call('HGETALL', key)
  local latest, dead = 0, {}
  for i = 1, #all, 2 do
    local e = tonumber(all[i + 1])
    if e > now then
      if e > latest then latest = e end
    else
      dead[#dead + 1] = all[i]
    end
  end
  if latest > 0 then
    for i = 1, #dead, 100 do
      redis.call('HDEL', key, unpack(dead, i, math.min(i + 99, #dead)))
    end
    removed = removed + #dead
    if not due or latest < due then due = latest end
  else
    if #all > 0 then redis.call('DEL', key) end -- expires this very ms
    redis.call('HDEL', KEYS[1], u)
    redis.call('DEL', ARGV[2] .. u)
    redis.call(PUBLISH, KEYS[2], ARGV[3] .. json_str(pct_dec(u)) .. ARGV[4] .. itoa(now) .. '}')
    stops = stops + 1
    removed = removed + math.max(1, #dead)
  end
end
return {stops, removed, now, due or -1}
