-- due.lua: claim the rooms of one sweep bucket that are due for an expiry
-- sweep, read against Redis TIME.
--
-- KEYS[1] sweep bucket typing:sweep:{s<k>}: member enc(room), score = due
--         unix ms, or a claim (see below)
-- ARGV[1] max rooms  ARGV[2] claim lease ms  ARGV[3] claim offset ms
--
-- Each room returned is claimed: its score becomes offset + now + lease,
-- above every due time (the offset is 10^13 ms, past the year 2286). The
-- worker holding the claim sweeps the room and then reschedules it with
-- reschedule.lua, which only replaces its own claim. Other workers skip
-- the room until the lease ends: an expired claim (offset + now or less)
-- is due again, so the rooms of a worker that died mid-sweep are swept by
-- another one a lease later. A start that lands meanwhile replaces the
-- claim (the worker's ZADD LT: its due time is below any claim), so the
-- reschedule sees that and cannot drop the room.
--
-- Returns {now_ms, enc(room)1, claim1, due1, enc(room)2, claim2, due2, ...}:
-- due rooms earliest first, then expired claims; claims and dues are
-- decimal strings (a reclaimed room's due is its old claim - offset).
local now = now_ms()
local max, lease, offset = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', itoa(now), 'WITHSCORES', 'LIMIT', 0, max)
if #due < 2 * max then
  local stale = redis.call('ZRANGEBYSCORE', KEYS[1], itoa(offset), itoa(offset + now), 'WITHSCORES', 'LIMIT', 0, max - #due / 2)
  for i = 1, #stale, 2 do
    due[#due + 1] = stale[i]
    due[#due + 1] = itoa(tonumber(stale[i + 1]) - offset - lease)
  end
end
local claim = itoa(offset + now + lease)
local out = {now}
for i = 1, #due, 2 do
  redis.call('ZADD', KEYS[1], claim, due[i])
  out[#out + 1] = due[i]
  out[#out + 1] = claim
  out[#out + 1] = due[i + 1]
end
return out
