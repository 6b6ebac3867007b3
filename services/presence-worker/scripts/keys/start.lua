-- keys/start.lua: apply one typing "start" in seed pattern 1 (store "keys"),
-- atomically. Same contract and outcomes as start.lua; the state is one key
-- per typist instead of one sorted set per room.
--
-- KEYS[1] typist hash       typing:{R}:enc(user)   field conn -> expiry (unix ms, Redis TIME);
--                                                   the key expires (PEXPIREAT) with its latest entry
-- KEYS[2] shown hash        typing:names:{R}       enc(user) -> display name ('' = none) of every
--                                                   typist receivers show (start published, no stop yet)
-- KEYS[3] seq string        typing:seq:{R}:enc(conn)
-- KEYS[4] throttle string   throttle:typing:{R}:enc(user)   value = end of window (unix ms)
-- KEYS[5] room channel      chat:room:{R}          (a key for cluster routing)
-- ARGV[1] conn  ARGV[2] enc(user)  ARGV[3] display name ('' = none)
-- ARGV[4] seq (decimal, '0' = unordered)  ARGV[5] ttl ms  ARGV[6] throttle ms
-- KEYS[6] sweep bucket      typing:sweep:{s<k>}    (standalone and Sentinel only; see start.lua)
-- ARGV[7] key grace ms  ARGV[8] enc(room)  ARGV[9] typing_start event JSON up to "ts_ms":
--
-- Returns {outcome, now_ms, expiry_ms}: stale, started, refreshed or
-- throttled (see start.lua).
local conn, euser, name, seq = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, throttle, grace = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])

if seq_stale(KEYS[3], seq, itoa(ttl + grace)) then
  return {'stale', 0}
end

local now = now_ms()

-- Visible before = the user has a live entry on any connection. The
-- connection's own field answers the common case (a refresh) in O(1);
-- otherwise the typist's few fields (one per typing connection) are read,
-- and expired ones are pruned on the way.
local visible = false
local own = redis.call('HGET', KEYS[1], conn)
if own and tonumber(own) > now then
  visible = true
else
  local all = redis.call('HGETALL', KEYS[1])
  local dead = {}
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) > now then
      visible = true
    else
      dead[#dead + 1] = all[i]
    end
  end
  for i = 1, #dead, 100 do
    redis.call('HDEL', KEYS[1], unpack(dead, i, math.min(i + 99, #dead)))
  end
end

-- Every entry is written now + ttl, so the newest is the latest: the key
-- lives exactly as long as the typist is visible, and SCAN (which skips
-- expired keys) lists exactly the visible typists.
local expiry = now + ttl
redis.call('HSET', KEYS[1], conn, itoa(expiry))
redis.call('PEXPIREAT', KEYS[1], itoa(expiry))
-- The names hash is also this store's set of shown users: a nameless start
-- (a platform service's) adds the user without erasing a name another
-- connection gave.
if name ~= '' then
  redis.call('HSET', KEYS[2], euser, name)
else
  redis.call('HSETNX', KEYS[2], euser, '')
end
redis.call('PEXPIRE', KEYS[2], itoa(ttl + grace))
if KEYS[6] then
  redis.call('ZADD', KEYS[6], 'LT', itoa(expiry), ARGV[8])
end

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
