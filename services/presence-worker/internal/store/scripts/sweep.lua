-- sweep.lua: settle one due room, atomically, touching only what is due:
-- push typing_stop(expired) for the users whose last entry ran out, publish
-- the final state of users whose transitions were coalesced (the trailing
-- edge of the event rate limit), and report when the room is next due. Any
-- number of workers may sweep the same room: the first run removes what is
-- due, later runs find nothing, so each event is published once.
--
-- KEYS[1] users zset  KEYS[2] pending zset  KEYS[3] room channel
-- KEYS[4] thread users zset (start.lua): thread members, enc(user):enc(thread),
-- are settled like the room's users, and their expiry stops carry "thread"
-- ARGV[1] user hash key prefix of the room, typing:user:{R}: (+ enc(user))
-- ARGV[2] typist key prefix, typing:{R}: (store keys: lib.lua, mark), '' = none
-- ARGV[3] typing_stop JSON up to and including "user":
-- ARGV[4] the rest up to and including "ts_ms": (',"reason":"expired","ts_ms":')
-- ARGV[5] throttle ms  ARGV[6] key px ms  ARGV[7] max users per kind per call
-- ARGV[8] '1': also return the events published (ELLIPSIS_NATS_EVENTS)
--
-- Cost O((E + P) log N): E expired (or lagging) and P pending users read,
-- at most ARGV[7] each (of the room's users and of its threads' each), plus the user hash of each of the E (its fields
-- are bounded: lib.lua's header); when either hit the limit the room is
-- due again at once.
--
-- Returns {stops_published, entries_removed, now_ms, next_due_ms,
-- starts_published[, events]}; next_due_ms is -1 when the room holds
-- nobody; events (ARGV[8] '1' only) lists the payloads published, in order.
local users, pending, channel, tusers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local throttle, keypx, limit = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local now = now_ms()
local stops, starts = 0, 0
local evs = ARGV[8] == '1' and {} or nil

-- publish sends msg on the room's channel, and keeps it for the reply.
local function publish(msg)
  redis.call(PUBLISH, channel, msg)
  if evs then evs[#evs + 1] = msg end
end

-- split returns the user and thread (nil: the room) of member u.
local function split(u)
  local eu, et = string.match(u, '^([^:]*):(.*)$')
  if eu then return eu, et end
  return u, nil
end

-- expiry_stop is the typing_stop(expired) of member u, up to "ts_ms":.
local function expiry_stop(u)
  local eu, et = split(u)
  if et then
    return ARGV[3] .. json_str(pct_dec(eu)) .. ',"thread":' .. json_str(pct_dec(et)) .. ARGV[4]
  end
  return ARGV[3] .. json_str(pct_dec(eu)) .. ARGV[4]
end

-- zset_of is the users zset member u lives in.
local function zset_of(u)
  if string.find(u, ':', 1, true) then return tusers end
  return users
end

-- settle tells receivers u's true state (visible) if they were last told
-- otherwise and the rate limit allows an event now; if it does not, u waits
-- in the pending set until it does. expired_stop is the stop to publish for
-- an expiry (nil: the one the suppressed stop left, else expired).
local function settle(u, visible, expired_stop)
  local key = ARGV[1] .. u
  local f = redis.call('HMGET', key, 'p', 'g', 'e', 'z', 'a', 'b')
  local told = f[5] or 'typing'
  -- A shown user whose latest start changed the activity (b) is not yet
  -- told it: e carries that start.
  if (f[1] == '1') == visible and not (visible and (f[6] or told) ~= told) then return end
  local ok, tat, next_ms = gcra(f[2], now, throttle)
  if not ok then
    if expired_stop then redis.call('HSET', key, 'z', expired_stop) end
    redis.call('ZADD', pending, itoa(next_ms), u)
    outlive(pending, tonumber(keypx))
    return
  end
  if visible then
    if not f[3] then return end -- no start event left: nothing to show
    publish(f[3] .. itoa(now) .. '}')
    starts = starts + 1
  else
    publish((expired_stop or f[4] or expiry_stop(u)) .. itoa(now) .. '}')
    stops = stops + 1
  end
  if visible then
    -- The trailing edge's typing_start opens a refresh window like
    -- start.lua's: refreshes within the throttle after it fan out nothing.
    redis.call('HSET', key, 'p', '1', 'g', itoa(tat), 'w', itoa(now + throttle))
    if f[6] and f[6] ~= told then redis.call('HSET', key, 'a', f[6]) end
  else
    redis.call('HSET', key, 'p', '0', 'g', itoa(tat))
  end
  outlive(key, tonumber(keypx))
end

-- Users whose score ran out. A score that lagged a throttled refresh
-- (lib.lua, INDEX_LAG_MS) moves to the user's true expiry, and so does
-- the typist key; the others' latest entry ran out: every entry of
-- theirs has. Either way the user hash loses its expired entries and
-- spent seq records (lib.lua, tidy).
local removed = 0
local full = false
for _, zs in ipairs({users, tusers}) do
  local expired = redis.call('ZRANGEBYSCORE', zs, '-inf', itoa(now), 'LIMIT', 0, limit)
  if #expired >= limit then full = true end
  for _, u in ipairs(expired) do
    local typist = ARGV[2] ~= '' and zs == users
    local latest = tidy(ARGV[1] .. u, now, tonumber(keypx))
    if latest > now then
      redis.call('ZADD', zs, itoa(latest), u)
      -- outlive too: the hash lives on past the score it now holds.
      redis.call('HSET', ARGV[1] .. u, 'i', itoa(latest))
      outlive(ARGV[1] .. u, tonumber(keypx))
      if typist then mark(ARGV[2] .. u, ARGV[1] .. u, u, latest, true) end
    else
      redis.call('ZREM', zs, u)
      removed = removed + 1
      if typist then redis.call('DEL', ARGV[2] .. u) end
      settle(u, false, expiry_stop(u))
    end
  end
end

-- Users whose coalesced transition is due: publish their true state.
local due = redis.call('ZRANGEBYSCORE', pending, '-inf', itoa(now), 'LIMIT', 0, limit)
for _, u in ipairs(due) do
  redis.call('ZREM', pending, u)
  local s = tonumber(redis.call('ZSCORE', zset_of(u), u) or '')
  settle(u, s ~= nil and (s > now or live_until(ARGV[1] .. u) > now), nil)
end

local next_due = -1
if full or #due >= limit then
  next_due = now
else
  for _, k in ipairs({users, pending, tusers}) do
    local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
    if #first > 0 then
      local s = tonumber(first[2])
      if next_due < 0 or s < next_due then next_due = s end
    end
  end
end
return {stops, removed, now, next_due, starts, evs}
