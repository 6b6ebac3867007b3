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
-- Scopes (start.lua): a stop names one (ARGV[15]: a thread, or '' the
-- room itself) and ends typing there only; a leave or disconnect
-- (ARGV[12] '1', always the room) also ends the connection in each thread
-- the user types in (field T of the room user hash, KEYS[10]: at most the
-- max threads per user), each checked against its own seq record, with a
-- typing_stop carrying "thread" built from ARGV[16] and ARGV[17].
--
-- Returns {outcome, now_ms, due_ms, events} (due_ms as start.lua; events:
-- the payloads of the threads' stops a leave or disconnect published, the
-- scope's own is rebuilt by the worker from the outcome); outcome, of the
-- scope the command names, is
--   stale      seq not above the connection's last applied seq, or than
--              its leave or disconnect: nothing changed
--   stopped    the user was shown and has no live entry left: typing_stop published
--   coalesced  the same, but the event rate limit is spent: the sweeper
--              publishes typing_stop when an event is allowed again
--   noop       nothing visible changed (not shown, or another connection of
--              the user is still typing)
local conn, euser, seq = ARGV[1], ARGV[2], ARGV[4]
local throttle, keypx = tonumber(ARGV[7]), ARGV[8]
local leaves = conn ~= '' and ARGV[12] == '1'
local ethread = ARGV[15]
local ordered = conn ~= '' and seq ~= '0'
local seqf = 'q:' .. conn
local me = 'c:' .. conn

local now = now_ms()
local evs = {}

-- stop_scope ends conn's entry (every entry of the user when conn is '')
-- in one scope: user hash, typist key, users zset, member, the stop event
-- up to "ts_ms":. check_gone: an ordered stop is also stale against the
-- connection's tombstones (a thread, start.lua). Returns outcome, due,
-- typed (the connection had a record in the scope), and the event
-- published (nil: none).
local function stop_scope(user, typist, users, member, ev, check_gone)
  local f = redis.call('HMGET', user, seqf, 'p', 'g', 'i', 's:' .. conn)
  if ordered and (stale(f[1], f[5], KEYS[9], KEYS[7], conn, seq)
      or (check_gone and gone(KEYS[9], KEYS[7], conn, seq))) then
    return 'stale', 0, false, nil
  end
  -- The user hash read whole: its fields are bounded (lib.lua's header),
  -- and the seq records spent are deleted here (with the connection's own
  -- when it leaves the room).
  local all = redis.call('HGETALL', user)
  local dead = spent(all, now, tonumber(keypx), seqf)
  if leaves then
    dead[#dead + 1] = seqf
    dead[#dead + 1] = 's:' .. conn
  end
  local typed = (f[1] or f[5]) and true or false
  local latest, before, cfields, has_t = 0, 0, {}, false
  for i = 1, #all, 2 do
    local k = all[i]
    if k == 't' then has_t = true end
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

  local kv = {}
  if ordered and not leaves then kv[#kv + 1] = seqf; kv[#kv + 1] = seq .. ' ' .. itoa(now) end
  local due = 0
  if conn ~= '' and latest > now then
    -- Another device of the user is still typing: drop this entry (and
    -- expired ones) only; the user's expiry, and the typist key's, becomes
    -- the latest left.
    hdel(user, dead)
    if latest < before then
      redis.call('ZADD', users, 'XX', itoa(latest), member)
      kv[#kv + 1] = 'i'; kv[#kv + 1] = itoa(latest)
      mark(typist, user, member, latest, true)
      due = latest
    end
    hset(user, kv)
    return 'noop', due, typed, nil
  end

  -- No live entry remains, nor a non-standard ttl (field t, start.lua).
  for _, k in ipairs(cfields) do dead[#dead + 1] = k end
  if has_t then dead[#dead + 1] = 't' end
  hdel(user, dead)
  if typist ~= user then redis.call('DEL', typist) end
  redis.call('ZREM', users, member)
  if f[4] and f[4] ~= '0' then kv[#kv + 1] = 'i'; kv[#kv + 1] = '0' end
  if conn == '' then kv[#kv + 1] = 'x'; kv[#kv + 1] = itoa(now) end
  local outcome, published = 'noop', nil
  if f[2] == '1' then
    local ok, tat, next_ms = gcra(f[3], now, throttle)
    if ok then
      published = ev .. itoa(now) .. '}'
      redis.call(PUBLISH, KEYS[5], published)
      kv[#kv + 1] = 'p'; kv[#kv + 1] = '0'
      kv[#kv + 1] = 'g'; kv[#kv + 1] = itoa(tat)
      outcome = 'stopped'
    else
      kv[#kv + 1] = 'z'; kv[#kv + 1] = ev
      redis.call('ZADD', KEYS[4], itoa(next_ms), member)
      outlive(KEYS[4], tonumber(keypx))
      due = next_ms
      outcome = 'coalesced'
    end
  end
  if #kv > 0 then
    hset(user, kv)
    outlive(user, tonumber(keypx))
  end
  return outcome, due, typed, published
end

local outcome, due, typed = stop_scope(KEYS[1], KEYS[2], KEYS[3], euser, ARGV[11], ethread ~= '')
if outcome == 'stale' and not leaves then return {'stale', now, 0, evs} end
-- A thread the user no longer types in leaves the user's list.
if ethread ~= '' and live_until(KEYS[1]) <= now then threads_leave(KEYS[10], ethread, now) end

if leaves then
  -- The connection leaves every thread of the room the user types in.
  local tusers, prefix = KEYS[3] .. ':threads', KEYS[1] .. ':'
  local list, keep = threads_read(KEYS[10]), {}
  for _, e in ipairs(list) do
    local key = prefix .. e[1]
    local ev = ARGV[16] .. ',"thread":' .. json_str(pct_dec(e[1])) .. ARGV[17]
    local o, d, t, published = stop_scope(key, key, tusers, euser .. ':' .. e[1], ev, false)
    if o ~= 'stale' then
      typed = typed or t
      if d > 0 and (due == 0 or d < due) then due = d end
      if published then evs[#evs + 1] = published end
    end
    if live_until(key) > now then keep[#keep + 1] = e end
  end
  if #keep < #list then threads_write(KEYS[10], keep, now) end
  -- A leave stale in the room itself (a later command of the connection
  -- applied there first) still ends the threads it is not stale in, each
  -- by its own seq record, and leaves its tombstone unless one at least as
  -- recent is there: a thread's delayed start older than it stays stale
  -- (start.lua reads the tombstones on every ordered thread start).
  if ordered and (outcome ~= 'stale' or not gone(KEYS[9], KEYS[7], conn, seq)) then
    if typed then
      bury(KEYS[9], KEYS[8], conn, seq, now, tonumber(keypx))
    else
      bury(KEYS[7], KEYS[6], conn, seq, now, tonumber(keypx))
    end
  end
end
index(KEYS[11], due, ARGV[10])
return {outcome, now, due, evs}
