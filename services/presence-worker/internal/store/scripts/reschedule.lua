-- reschedule.lua: after sweeping claimed rooms, set when each is next due.
--
-- KEYS[1] sweep bucket typing:sweep:{s<k>} (see due.lua)
-- ARGV    triples: enc(room), the claim due.lua returned, next due unix ms
--         from the sweep script (-1: no typist left)
--
-- When the room still holds our claim, nothing was indexed for it since we
-- claimed it (a start's ZADD LT replaces any claim): its score becomes the
-- next due time, or it leaves the bucket when no typist is left. Otherwise
-- a start or another worker's claim came in between: the room stays, and
-- its score moves to the next due time if that is earlier (a claim of
-- another worker is replaced too; that worker's reschedule then keeps the
-- room the same way).
--
-- Returns the number of rooms removed from the bucket.
local removed = 0
for i = 1, #ARGV, 3 do
  local room, claim, nxt = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local cur = redis.call('ZSCORE', KEYS[1], room)
  if cur and tonumber(cur) == tonumber(claim) then
    if nxt < 0 then
      redis.call('ZREM', KEYS[1], room)
      removed = removed + 1
    else
      redis.call('ZADD', KEYS[1], ARGV[i + 2], room)
    end
  elseif nxt >= 0 then
    redis.call('ZADD', KEYS[1], 'LT', ARGV[i + 2], room)
  end
end
return removed
