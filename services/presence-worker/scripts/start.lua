-- start.lua: apply one typing "start" of a connection in a room, atomically.
--
-- KEYS[1] room sorted set   typing:room:{R}      member enc(user):conn, score = expiry (unix ms)
-- KEYS[2] names hash        typing:names:{R}     enc(user) -> display name
-- KEYS[3] seq string        typing:seq:{R}:enc(conn)
-- KEYS[4] throttle string   throttle:typing:{R}:enc(user)   value = end of window (unix ms)
-- KEYS[5] room channel      chat:room:{R}        (a key for cluster routing)
-- ARGV[1] member  ARGV[2] enc(user)  ARGV[3] display name ('' = none)
-- ARGV[4] seq (decimal, '0' = unordered)  ARGV[5] ttl ms  ARGV[6] throttle ms
-- KEYS[6] sweep bucket      typing:sweep:{s<k>}  (standalone and Sentinel only)
-- ARGV[7] key grace ms  ARGV[8] enc(room)  ARGV[9] typing_start event JSON up to "ts_ms":
--
-- With KEYS[6] the room enters its sweep bucket in this same atomic step.
-- On Redis Cluster the bucket is in another hash slot, so KEYS[6] is
-- absent and the worker adds the room after the call (store.go, index).
--
-- Returns {outcome, now_ms, expiry_ms} (expiry_ms: the entry's new expiry,
-- 0 when stale); outcome is
--   stale      seq not above the connection's last applied seq: nothing changed
--   started    the user was not visible: entry added, typing_start published
--   refreshed  visible already, throttle window over: entry extended, typing_start published
--   throttled  visible already, inside the window: entry extended, nothing published
local member, euser, name, seq = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, throttle, grace = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])

if seq_stale(KEYS[3], seq, itoa(ttl + grace)) then
  return {'stale', 0}
end

local now = now_ms()

-- Visible before = the user has a live entry on any connection. The
-- connection's own entry answers the common case (a refresh) in O(log N).
local visible = false
local own = redis.call('ZSCORE', KEYS[1], member)
if own and tonumber(own) > now then
  visible = true
else
  local live = user_members(KEYS[1], euser .. ':', now)
  visible = live > 0
end

local expiry = now + ttl
redis.call('ZADD', KEYS[1], itoa(expiry), member)
-- The room frees its memory on its own when nobody refreshes it: the seed's
-- fail-safe TTL at room granularity.
redis.call('PEXPIRE', KEYS[1], itoa(ttl + grace))
-- A start without a name (a platform service's) keeps the name another
-- connection of the user gave; the name goes when the user stops showing.
if name ~= '' then
  redis.call('HSET', KEYS[2], euser, name)
  redis.call('PEXPIRE', KEYS[2], itoa(ttl + grace))
end
-- Earliest due time wins (LT also adds, and replaces a sweeper's claim).
if KEYS[6] then
  redis.call('ZADD', KEYS[6], 'LT', itoa(expiry), ARGV[8])
end

-- The throttle holds the end of its window and is checked against TIME, so
-- it behaves as SET NX PX on Redis and does not depend on key-expiry clocks
-- on servers whose TTLs lag (miniredis without ClockTTL).
local window_end = now + throttle
local outcome
if not visible then
  outcome = 'started'
else
  local until_ms = tonumber(redis.call('GET', KEYS[4]) or '')
  if until_ms and until_ms > now then
    return {'throttled', now, expiry}
  end
  outcome = 'refreshed'
end
redis.call('SET', KEYS[4], itoa(window_end), 'PX', itoa(throttle))
redis.call(PUBLISH, KEYS[5], ARGV[9] .. itoa(now) .. '}')
return {outcome, now, expiry}
