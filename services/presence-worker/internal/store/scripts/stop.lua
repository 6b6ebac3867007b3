-- stop.lua: end one connection's entry (or all of a user's entries) in a
-- room, atomically: typing_stop, leave, and each room of a disconnect. Cost
-- O(log N) of the room's typists plus the user hash's fields (lib.lua's
-- header bounds them: the user's live connections and those that
-- vanished in the last keypx ms), plus O(log T) of the T tombstones of
-- its class in the room for a leave or disconnect (lib.lua, bury).
--
-- KEYS and ARGV as start.lua, with ARGV[1] conn '' = every connection of
-- the user (seq then ignored, and the stop time recorded in field x so
-- that starts sent before it are superseded), ARGV[3] unused, ARGV[11]
-- the typing_stop event JSON up to "ts_ms": and ARGV[12] '1' when the
-- connection leaves the room (a leave, or one room of its disconnect): its
-- entry and seq records leave the user hash, and its tombstone (its seq)
-- is left in the room (lib.lua, bury), so that its commands delayed past
-- it are stale: a typist's (KEYS[8], KEYS[9]) when it had a seq record or
-- an entry in the user hash, else a reader's (KEYS[6], KEYS[7]).
--
-- Returns {outcome, now_ms, due_ms} (due_ms as start.lua); outcome is
--   stale      seq not above the connection's last applied seq, or than
--              its leave or disconnect: nothing changed
--   stopped    the user was shown and has no live entry left: typing_stop published
--   coalesced  the same, but the event rate limit is spent: the sweeper
--              publishes typing_stop when an event is allowed again
--   noop       nothing visible changed (not shown, or another connection of
--              the user is still typing)
local conn, euser, seq = ARGV[1], ARGV[2], ARGV[4]
local throttle, keypx = tonumber(ARGV[7]), ARGV[8]
local user, typist, users = KEYS[1], KEYS[2], KEYS[3]
local leaves = conn ~= '' and ARGV[12] == '1'

local now = now_ms()
local seqf = 'q:' .. conn
local f = redis.call('HMGET', user, seqf, 'p', 'g', 'i', 's:' .. conn)
local ordered = conn ~= '' and seq ~= '0'
if ordered and stale(f[1], f[5], KEYS[9], KEYS[7], conn, seq) then
  return {'stale', now, 0}
end

-- The user hash read whole: its fields are bounded (lib.lua's header),
-- and the seq records spent are deleted here (with the connection's own
-- when it leaves the room).
local all = redis.call('HGETALL', user)
local me = 'c:' .. conn
local dead = spent(all, now, tonumber(keypx), seqf)
if leaves then
  dead[#dead + 1] = seqf
  dead[#dead + 1] = 's:' .. conn
end
-- typed: the connection has a record in the room (it commanded here).
local typed = (f[1] or f[5]) and true or false
local latest, before, cfields = 0, 0, {}
for i = 1, #all, 2 do
  local k = all[i]
  if string.sub(k, 1, 2) == 'c:' then
    local e = tonumber(all[i + 1])
    cfields[#cfields + 1] = k
    if e > before then before = e end
    if k == me then typed = true end
    if k == me or e <= now then
      dead[#dead + 1] = k
    elseif e > latest then
      latest = e
    end
  end
end
if leaves and ordered then
  if typed then
    bury(KEYS[9], KEYS[8], conn, seq, now, tonumber(keypx))
  else
    bury(KEYS[7], KEYS[6], conn, seq, now, tonumber(keypx))
  end
end

local kv = {}
if ordered and not leaves then kv[#kv + 1] = seqf; kv[#kv + 1] = seq .. ' ' .. itoa(now) end
local due = 0
if conn ~= '' and latest > now then
  -- Another device of the user is still typing: drop this entry (and
  -- expired ones) only; the user's expiry, and the typist key's, becomes
  -- the latest left.
  hdel(user, dead)
  if latest < before then
    redis.call('ZADD', users, 'XX', itoa(latest), euser)
    kv[#kv + 1] = 'i'; kv[#kv + 1] = itoa(latest)
    mark(typist, user, euser, latest, true)
    due = latest
  end
  hset(user, kv)
  index(KEYS[10], due, ARGV[10])
  return {'noop', now, due}
end

-- No live entry remains.
for _, k in ipairs(cfields) do dead[#dead + 1] = k end
hdel(user, dead)
if typist ~= user then redis.call('DEL', typist) end
redis.call('ZREM', users, euser)
if f[4] and f[4] ~= '0' then kv[#kv + 1] = 'i'; kv[#kv + 1] = '0' end
if conn == '' then kv[#kv + 1] = 'x'; kv[#kv + 1] = itoa(now) end
local outcome = 'noop'
if f[2] == '1' then
  local ok, tat, next_ms = gcra(f[3], now, throttle)
  if ok then
    redis.call(PUBLISH, KEYS[5], ARGV[11] .. itoa(now) .. '}')
    kv[#kv + 1] = 'p'; kv[#kv + 1] = '0'
    kv[#kv + 1] = 'g'; kv[#kv + 1] = itoa(tat)
    outcome = 'stopped'
  else
    kv[#kv + 1] = 'z'; kv[#kv + 1] = ARGV[11]
    redis.call('ZADD', KEYS[4], itoa(next_ms), euser)
    redis.call('PEXPIRE', KEYS[4], keypx)
    due = next_ms
    outcome = 'coalesced'
  end
end
if #kv > 0 then
  hset(user, kv)
  redis.call('PEXPIRE', user, keypx)
end
index(KEYS[10], due, ARGV[10])
return {outcome, now, due}
