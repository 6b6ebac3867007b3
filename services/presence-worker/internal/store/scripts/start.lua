-- start.lua: apply one typing "start" of a connection in a room, atomically,
-- in O(log N) of the room's typists (N) and O(1) otherwise (a tombstone
-- read of each class on the connection's first command in the room),
-- plus the user hash's fields (bounded: lib.lua's header) on a start
-- whose ttl is shorter than the user's score.
--
-- A scope is the room itself or one thread of it (docs/protocol.md,
-- "Threads and activities"): a thread's typist is the member
-- enc(user):enc(thread) (enc escapes ':', so the split is unique) with its
-- own user hash and the room's thread users zset; the room's other keys
-- are shared. Everything below is per scope.
--
-- KEYS[1]  user hash      typing:user:{R}:enc(user)  (fields: lib.lua), or
--                         typing:user:{R}:enc(user):enc(thread) for a thread
-- KEYS[2]  typist key     typing:{R}:enc(user) (store keys: lib.lua, mark)
--                         or KEYS[1] itself (store zset: no such key)
-- KEYS[3]  users zset     typing:users:{R}         enc(user) -> latest expiry (unix ms), or
--                         typing:users:{R}:threads enc(user):enc(thread) -> the same
-- KEYS[4]  pending zset   typing:pending:{R}       enc(user) -> when the sweeper settles it
-- KEYS[5]  room channel   chat:room:{R}            (a key for cluster routing)
-- KEYS[6]  readers' ends  typing:gone:{R}          conn -> when its tombstone ends (unix ms; lib.lua, bury)
-- KEYS[7]  readers' seqs  typing:goneseq:{R}       conn -> its seq when it left or disconnected
-- KEYS[8]  typists' ends  typing:gonetyped:{R}     as KEYS[6], of connections that had a record
-- KEYS[9]  typists' seqs  typing:gonetypedseq:{R}  in the user hash then (lib.lua's header)
-- KEYS[10] room user hash typing:user:{R}:enc(user): its field T lists the
--                         user's thread scopes (lib.lua, threads_*); KEYS[1] for the room
-- KEYS[11] sweep bucket   typing:sweep:{s<k>}      (standalone and Sentinel only)
-- ARGV (args.go): 1 conn  2 member (enc(user), or enc(user):enc(thread))  3 name ('' = none)
--   4 seq (decimal, '0' = unordered)  5 ts_ms (gateway send time, '0' = none)
--   6 ttl ms  7 throttle ms  8 key px ms  9 stop guard ms  10 enc(room)
--   11 typing_start event JSON up to "ts_ms":
--   12 '1': the connection leaves the room (stop.lua: leave, disconnect)
--   13 activity ('typing' by default)  14 max threads per user
--   15 enc(thread) ('' = the room itself)
--   16, 17 stop.lua only: the typing_stop JSON up to and including
--      "user":<user>, and the rest up to "ts_ms": (a leave's thread stops)
--   18 the standard ttl ms (ELLIPSIS_TYPING_TTL): a start whose ttl
--      differs records it in field t (lib.lua's header) for snapshots
--
-- ARGV[6] (ttl) and ARGV[8] (key px) are the call's own: a platform
-- service's start may carry a longer ttl. Keys' expiries therefore only
-- ever move later (lib.lua, outlive), so a standard start never cuts short
-- a key that holds a longer entry.--
-- Returns {outcome, now_ms, due_ms}; due_ms > 0: the room must be due in its
-- sweep bucket by then (done here with KEYS[10], by the worker otherwise).
--   stale       seq not above the connection's last applied seq, or than
--               its leave or disconnect (a tombstone, lib.lua gone; in a
--               thread read on every ordered start, as a leave does not
--               delete the thread's seq records of scopes no longer typed)
--   too_many_threads  a thread start of a user already typing in ARGV[14]
--               other threads of the room: refused, nothing written
--   late        sent more than ttl ago (ts_ms): never shown
--   superseded  sent before (or within the stop guard after) the user's last
--               stop without conn: never shown
--   started     the user was not shown: entry added, typing_start published
--   refreshed   shown, refresh window over, or the activity changed: entry
--               extended, typing_start published
--   throttled   shown, same activity, inside the window (or no event
--               allowed): entry extended
--   coalesced   not shown, or shown with another activity, and the event
--               rate limit is spent: entry written, the sweeper publishes
--               typing_start (the latest one, field e) when an event is
--               allowed again
--
-- Activity fields of the scope's hash: a, the activity receivers were
-- last told (absent: typing), and b, the latest applied start's (absent:
-- a). b differs from a only after a coalesced start, which leaves its
-- event in e: the sweeper publishes e while b differs from a.
local conn, euser, name, seq = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ts, ttl, throttle = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local keypx, guard = ARGV[8], tonumber(ARGV[9])
local act, ethread = ARGV[13], ARGV[15]
local user, typist, users = KEYS[1], KEYS[2], KEYS[3]

local now = now_ms()
local seqf = 'q:' .. conn
local f = redis.call('HMGET', user, seqf, 'p', 'w', 'x', 'n', 'g', 'i', 's:' .. conn, 'a', 'b', 't')
if seq ~= '0' and (stale(f[1], f[8], KEYS[9], KEYS[7], conn, seq)
    or (ethread ~= '' and gone(KEYS[9], KEYS[7], conn, seq))) then
  return {'stale', now, 0}
end
if ts > 0 then
  if now - ts > ttl then return {'late', now, 0} end
  if f[4] and ts < tonumber(f[4]) + guard then return {'superseded', now, 0} end
end

local expiry = now + ttl
if ethread ~= '' and not threads_enter(KEYS[10], ethread, expiry, now, tonumber(ARGV[14]), tonumber(keypx)) then
  return {'too_many_threads', now, 0}
end
local kv = {}
if seq ~= '0' then kv[#kv + 1] = seqf; kv[#kv + 1] = seq .. ' ' .. itoa(now) end
-- A start without a name (a platform service's) keeps the name another
-- connection of the user gave.
if name ~= '' and name ~= f[5] then kv[#kv + 1] = 'n'; kv[#kv + 1] = name end
kv[#kv + 1] = 'c:' .. conn; kv[#kv + 1] = itoa(expiry)
local told = f[9] or 'typing'
-- Field t: the latest-expiring entry with a non-standard ttl, for
-- snapshots (snapshot.lua). This start's entry replaces it when it
-- expires as late or later; a standard entry that outlives it makes the
-- standard ttl right again. An entry that another start of the same
-- connection shortened may leave t later than the true expiry: a
-- snapshot then gives the longer ttl, and the expiry stop still ends the
-- typist in time.
local t_until = tonumber(string.match(f[11] or '', ' (%d+)$') or '') or 0
if ttl ~= tonumber(ARGV[18]) then
  if expiry >= t_until then kv[#kv + 1] = 't'; kv[#kv + 1] = itoa(ttl) .. ' ' .. itoa(expiry) end
elseif f[11] and expiry >= t_until then
  redis.call('HDEL', user, 't')
end
if act ~= (f[10] or told) then kv[#kv + 1] = 'b'; kv[#kv + 1] = act end
-- Every entry is written now + ttl, so the user's score grows here (unless
-- a longer ttl wrote it, below); a new member may be the room's earliest
-- expiry: index it. A throttled refresh leaves a score that lags expiry by
-- less than the index lag (lib.lua, INDEX_LAG_MS): no O(log N) ZADD on the
-- hot path of a client that refreshes too often; the sweeper moves a
-- lagging score when it comes due (sweep.lua).
local shown = f[2] == '1'
-- A shown user's change of activity is a state change, like a start.
local changed = shown and act ~= told
local throttled = shown and not changed and (tonumber(f[3] or '') or 0) > now
local due = 0
local added = false -- the user joined the users zset (its expiry renewed then)
local indexed = tonumber(f[7] or '') or 0
-- The user's true expiry, where store keys's typist key expires (mark):
-- this entry's, unless the users zset says another entry may be later.
local until_ms, exact = expiry, false
if not (throttled and indexed <= expiry and indexed > expiry - math.min(INDEX_LAG_MS, math.floor(ttl / 4))) then
  -- A score above expiry (a worker with a longer ttl wrote it) is lowered,
  -- but never below another connection's live entry, and the room is then
  -- due by the new score.
  local score = expiry
  if indexed > expiry then
    score = math.max(expiry, live_until(user, 'c:' .. conn))
    until_ms, exact = score, true
  end
  added = redis.call('ZADD', users, itoa(score), euser) == 1
  if added then outlive(users, tonumber(keypx)) end
  if added or score < indexed then due = score end
  kv[#kv + 1] = 'i'; kv[#kv + 1] = itoa(score)
end

if throttled then
  hset(user, kv)
  mark(typist, user, euser, until_ms, exact)
  index(KEYS[11], due, ARGV[10])
  return {'throttled', now, due}
end

-- A transition, a change of activity, or a refresh after its window: one
-- event if allowed.
local ok, tat, next_ms = gcra(f[6], now, throttle)
local outcome
if ok then
  redis.call(PUBLISH, KEYS[5], ARGV[11] .. itoa(now) .. '}')
  kv[#kv + 1] = 'p'; kv[#kv + 1] = '1'
  kv[#kv + 1] = 'w'; kv[#kv + 1] = itoa(now + throttle)
  kv[#kv + 1] = 'g'; kv[#kv + 1] = itoa(tat)
  if act ~= told then kv[#kv + 1] = 'a'; kv[#kv + 1] = act end
  outcome = shown and 'refreshed' or 'started'
elseif shown and not changed then
  kv[#kv + 1] = 'w'; kv[#kv + 1] = itoa(now + throttle)
  outcome = 'throttled'
else
  kv[#kv + 1] = 'e'; kv[#kv + 1] = ARGV[11]
  redis.call('ZADD', KEYS[4], itoa(next_ms), euser)
  outlive(KEYS[4], tonumber(keypx))
  if due == 0 or next_ms < due then due = next_ms end
  outcome = 'coalesced'
end
hset(user, kv)
-- The hash and the room's set outlive every entry: they are renewed at
-- least once per refresh window, and live ttl + grace + throttle. The
-- typist key lives exactly as long as the user's entries.
outlive(user, tonumber(keypx))
if not added then outlive(users, tonumber(keypx)) end
mark(typist, user, euser, until_ms, exact)
index(KEYS[11], due, ARGV[10])
return {outcome, now, due}
