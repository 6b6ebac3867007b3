-- snapshot.lua: who is typing in a room now (read only), in
-- O(limit + log N) of the room's typists N.
--
-- KEYS[1] users zset (start.lua)
-- ARGV[1] user hash key prefix of the room, typing:user:{R}: (+ enc(user))
-- ARGV[2] max users listed
--
-- Returns {total, enc(user)1, name1, enc(user)2, name2, ...}. A user is
-- listed when receivers were told they type (hash field p = '1') and their
-- entry is live (score > now, or a later entry when the score lags: see
-- below): a snapshot agrees with the event stream. A
-- user whose typing_start is held by the transition throttle (the sweeper
-- publishes it later, the trailing edge) is not listed yet; were they
-- listed, a stop coalesced in turn would leave receivers showing them, as
-- no typing_stop follows a start that was never published. The users
-- listed are the ARGV[2] most recently active of those; total counts the
-- users whose score is above now - INDEX_LAG_MS, less the unshown and the
-- expired ones among those read (exact when the room has at most ARGV[2]
-- such users; beyond, it may count users whose entries ran out in the
-- last second and are not swept yet).
local now = now_ms()
-- Scores down to INDEX_LAG_MS below now: a user whose score lags a
-- throttled refresh (lib.lua) is live until the latest of their entries
-- (store zset: fields c:<conn> of the user hash), which is read for those
-- only; the others are live by their score.
local from = '(' .. itoa(now - INDEX_LAG_MS)
local total = redis.call('ZCOUNT', KEYS[1], from, '+inf')
local out = {total}
if tonumber(ARGV[2]) > 0 then
  local r = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', from, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
  for i = 1, #r, 2 do
    local u, key = r[i], ARGV[1] .. r[i]
    local h = redis.call('HMGET', key, 'p', 'n')
    if h[1] == '1' and (tonumber(r[i + 1]) > now or live_until(key) > now) then
      out[#out + 1] = u
      out[#out + 1] = h[2] or ''
    else
      total = total - 1
    end
  end
end
out[1] = total
return out
