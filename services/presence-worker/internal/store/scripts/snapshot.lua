-- snapshot.lua: who is typing in a room now (read only), in
-- O(limit + HELD_READ_MAX + LAG_READ_MAX + log N) of the room's typists N.
--
-- KEYS[1] users zset  KEYS[2] thread users zset (start.lua)
-- ARGV[1] user hash key prefix of the room, typing:user:{R}: (+ member)
-- ARGV[2] max users listed, per part  ARGV[3] '1': list the room itself
-- too, '0': its threads only (store keys lists the room with SCAN)
--
-- Returns {total, room, threads, counts}: room is {enc(user)1, name1,
-- activity1, ttl1, ...} (empty with ARGV[3] '0'), total its users; threads is
-- {member1, name1, activity1, ttl1, ...} of the threads' typists, members
-- enc(user):enc(thread), at most ARGV[2] in all; counts is {enc(thread)1,
-- n1, ...}: per thread, its shown live typists among those read, exact
-- when the room's threads have at most ARGV[2] + HELD_READ_MAX typists
-- with a score above now (the most recent are read). Activity '' is
-- typing. ttl is '' for a typist whose entries have the standard ttl,
-- else the ttl (ms, decimal) of its latest-expiring entry started with
-- another (a platform service's ttl_ms; lib.lua, entry_ttl): read from
-- the hash each listed typist's HMGET reads anyway. A user is
-- listed when receivers were told they type (hash field p = '1') and their
-- entry is live: a snapshot agrees with the event stream. A user whose
-- typing_start is held by the transition throttle (the sweeper publishes
-- it later, the trailing edge) is not listed yet; were they listed, a stop
-- coalesced in turn would leave receivers showing them, as no typing_stop
-- follows a start that was never published.
--
-- Live means a score above now, or, for a score that passed less than
-- INDEX_LAG_MS ago, a connection entry still live (live_until): the score
-- lags a throttled refresh (lib.lua); the others there expired and are
-- not swept yet. The users listed are the ARGV[2] most recently active
-- shown live ones (by score). total counts the users with a score above
-- now, less the unshown ones among the ARGV[2] + HELD_READ_MAX latest
-- (all read), plus the shown live ones among the at most
-- ARGV[2] + LAG_READ_MAX latest scores that passed: exact when the room
-- has at most ARGV[2] + HELD_READ_MAX users above now and at most
-- ARGV[2] + LAG_READ_MAX whose score passed in the last INDEX_LAG_MS
-- (beyond, a held or lagging user may be counted wrongly until the sweep
-- publishes the held start or moves the lagging score, within a sweep
-- interval).

-- LAG_READ_MAX is how many users whose score passed are read beyond
-- ARGV[2], for the expired ones among them (the sweep's per-room batch,
-- sweepRoomLimit).
local LAG_READ_MAX = 64
-- HELD_READ_MAX is how many users with a score above now are read beyond
-- ARGV[2], for the unshown ones among them: a start the event rate limit
-- holds (start.lua, coalesced) leaves its user live but not shown, and
-- must not keep a shown user out of the list.
local HELD_READ_MAX = 64
local now = now_ms()
local limit = tonumber(ARGV[2])
local live = '(' .. itoa(now)

-- scope lists the shown live members of zset z, at most limit, as
-- {member, name, activity, ttl, ...}, and returns them with the count of
-- total (ZCOUNT, corrected as above) and on_count(member) for each shown
-- live member read.
local function scope(z, on_count)
  local total = redis.call('ZCOUNT', z, live, '+inf')
  local out, listed = {}, 0
  -- shown reports whether receivers were told live member u types, and
  -- lists u (with name, activity and ttl) while fewer than limit are
  -- listed.
  local function shown(u)
    if listed >= limit then
      return redis.call('HGET', ARGV[1] .. u, 'p') == '1'
    end
    local h = redis.call('HMGET', ARGV[1] .. u, 'p', 'n', 'a', 't')
    if h[1] ~= '1' then return false end
    out[#out + 1] = u
    out[#out + 1] = h[2] or ''
    out[#out + 1] = h[3] or ''
    out[#out + 1] = entry_ttl(h[4], now)
    listed = listed + 1
    return true
  end
  for _, u in ipairs(redis.call('ZREVRANGEBYSCORE', z, '+inf', live, 'LIMIT', 0, limit + HELD_READ_MAX)) do
    if shown(u) then on_count(u) else total = total - 1 end
  end
  -- Scores that passed less than INDEX_LAG_MS ago: a lagging user (live by
  -- the latest of their entries) or an expired one the sweep has not
  -- removed yet (not live).
  for _, u in ipairs(redis.call('ZREVRANGEBYSCORE', z, itoa(now), '(' .. itoa(now - INDEX_LAG_MS), 'LIMIT', 0, limit + LAG_READ_MAX)) do
    if live_until(ARGV[1] .. u) > now and shown(u) then
      total = total + 1
      on_count(u)
    end
  end
  return out, total
end

local room, total = {}, 0
if ARGV[3] == '1' then room, total = scope(KEYS[1], function() end) end
local counts, order = {}, {}
local threads = scope(KEYS[2], function(u)
  local et = string.match(u, ':(.*)$')
  if not counts[et] then
    counts[et] = 0
    order[#order + 1] = et
  end
  counts[et] = counts[et] + 1
end)
local flat = {}
for _, et in ipairs(order) do
  flat[#flat + 1] = et
  flat[#flat + 1] = counts[et]
end
return {total, room, threads, flat}
