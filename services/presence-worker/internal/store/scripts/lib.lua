-- lib.lua: helpers prepended to every Ellipsis presence-worker script (see
-- store.go). It must run on Redis 7 (Lua 5.1) and on miniredis (gopher-lua),
-- so it uses only the Lua 5.1 base, string, table and math libraries.
--
-- The per-(room, user) state every command script reads first is one hash,
-- typing:user:{R}:enc(user) (docs/ARCHITECTURE.md, "Typing state"):
--   p      '1' when receivers were last told the user types (typing_start
--          published, no typing_stop since), else '0' or absent
--   w      end of the refresh window (unix ms): a start of a shown user
--          before it publishes nothing (the leading-edge throttle)
--   g      theoretical arrival time of the event rate limit (gcra below)
--   x      Redis TIME of the last stop without conn (the platform's
--          "message posted"): older starts are superseded
--   n      display name ('' = none)
--   t      "<ttl ms> <expiry unix ms>": the scope's latest-expiring entry
--          started with a ttl other than the standard ttl (a platform
--          service's own ttl_ms, start.lua), absent when every entry has
--          the standard ttl; snapshots give its ttl as the typist's ttl_ms
--          while that expiry is ahead (entry_ttl)
--   e, z   the typing_start / typing_stop event a suppressed transition
--          leaves for the sweeper (the trailing edge)
--   i      the user's score in the room's users zset (unix ms) as last
--          written by these scripts, '0' after they removed the user
--   q:<conn> conn's seq record, "<seq> <ms>": its last applied seq and the
--            Redis TIME (unix ms) it was written; deleted by the
--            connection's leave or disconnect, and, keypx ms after its last write,
--            by whichever script next reads the hash whole (spent)
--   s:<conn> a seq record of workers before q:<conn> (just "<seq>"): read
--            for ordering, deleted with the connection or once its entry
--            is gone (spent)
--   c:<conn> expiry (unix ms) of conn's entry
--
-- The hash therefore holds O(the user's live connections) fields, plus
-- one per connection of the user that vanished without a disconnect (a
-- killed gateway) in the last keypx ms.
--
-- A leave or disconnect of a connection deletes its fields and leaves
-- its tombstone in the room (gone, bury), so that a command of it delayed
-- past the leave or disconnect is stale, not a ghost entry, while one
-- after a rejoin (a higher seq) applies. Tombstones come in two classes,
-- each in its own pair of keys and capped on its own (GONE_MAX): a
-- typist's, of a connection that had a record in the user hash at the
-- leave (q:, s: or c:, it commanded in the room), in
-- typing:gonetyped:{R} and typing:gonetypedseq:{R}; and a reader's, of
-- one that had none (it only read the room, or its commands are still
-- on their way), in typing:gone:{R} and typing:goneseq:{R}. Readers
-- leaving in any number so never push out a typist's tombstone.
--
-- Store keys also keeps the typist key typing:{R}:enc(user), which
-- expires at the user's true expiry (mark).
--
-- The users zset's score of a user may lag the user's true expiry (the
-- latest c:<conn>) by up to INDEX_LAG_MS: a throttled refresh leaves the
-- score alone while it is that close (start.lua), so that the refresh
-- costs no O(log N) ZADD. Whoever reads a score at or below now checks the
-- user's entries before taking the user as expired (live_until).

-- INDEX_LAG_MS bounds how far a user's users-zset score may lag the
-- user's true expiry: at most min(INDEX_LAG_MS, ttl / 4) (start.lua).
-- snapshot.lua reads scores this far below now to find such users.
local INDEX_LAG_MS = 1000

-- now_ms returns Redis TIME as integral unix milliseconds. Scores and ts_ms
-- always come from here, never from a worker's or a client's clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- itoa formats an integral number without an exponent (unix ms has 13 digits,
-- which %.14g would also print exactly; this does not depend on it).
local function itoa(n)
  return string.format('%d', n)
end

-- seq_le reports whether decimal string a <= decimal string b. Both are
-- canonical unsigned integers (no sign, no leading zeros) so comparing length
-- then bytes is exact for the whole uint64 range, beyond a double's 2^53.
local function seq_le(a, b)
  if #a ~= #b then return #a < #b end
  return a <= b
end

-- gcra is the per-(room, user) event rate limit (issue 13, item 3): a
-- token bucket of 2 events per throttle window with a burst of 4, as the
-- generic cell rate algorithm (one number, the theoretical arrival time
-- tat, instead of a count and a time). Every event published about a user
-- (start, refresh, stop, and the sweeper's) takes one, so over any span T
-- receivers get at most 4 + 2 * ceil(T / throttle) events about the user.
-- Returns allowed, the tat to store when allowed, and when not the unix ms
-- at which the next event will be allowed.
local function gcra(tat, now, throttle)
  local interval = math.max(1, math.floor(throttle / 2))
  local t = math.max(tonumber(tat or '') or 0, now)
  if t - now > 3 * interval then
    return false, t, t - 3 * interval
  end
  return true, t + interval, 0
end

-- hset writes the field/value list kv to key in one call (nothing when
-- empty).
local function hset(key, kv)
  if #kv > 0 then redis.call('HSET', key, unpack(kv)) end
end

-- hdel deletes the fields of list fs from key, 1,000 per call (Lua's
-- unpack is bounded; a hash written by older workers may hold more).
local function hdel(key, fs)
  for i = 1, #fs, 1000 do
    redis.call('HDEL', key, unpack(fs, i, math.min(#fs, i + 999)))
  end
end

-- last_seq is the last applied seq of a connection from its seq record q
-- ("<seq> <ms>") and its older-format record s ("<seq>"), either nil: the
-- higher of the two, nil when there is none.
local function last_seq(q, s)
  q = q and string.match(q, '^%d+')
  if q and s and seq_le(q, s) then return s end
  return q or s or nil
end

-- GONE_MAX bounds each class of a room's tombstones (lib.lua's header):
-- past it the ones of that class that end first are dropped, never those
-- of the other class, and a delayed command of such a connection is
-- applied as its first one in the room (docs/protocol.md, "Bounds").
local GONE_MAX = 10000
-- GONE_PRUNE is how many ended tombstones one bury drops at most: more
-- than the one it adds, so they never pile up, and a bounded step.
local GONE_PRUNE = 16

-- gone reports whether seq is not above the seq of one of conn's
-- tombstones in the room (conn left the room or disconnected with that
-- seq): a command of it delayed past its leave or disconnect. typed and
-- read are the seq hashes (conn -> seq) of the two classes (lib.lua's
-- header), a connection may have one in each; their ends are in zsets
-- (bury). One ended but not yet dropped still orders truly older
-- commands, so only the hashes are read. O(1) (an HGET each).
local function gone(typed, read, conn, seq)
  local s = redis.call('HGET', typed, conn)
  if s and seq_le(seq, s) then return true end
  s = redis.call('HGET', read, conn)
  return s and seq_le(seq, s)
end

-- stale reports whether an ordered command (seq ~= '0') of conn is not
-- newer than what the room knows of conn: its seq records q and s (the
-- user hash's q:<conn> and s:<conn>, either nil; last_seq) or, only when
-- it has none (the connection's first command in the room), its
-- tombstones (gone, typed and read as there).
local function stale(q, s, typed, read, conn, seq)
  local last = last_seq(q, s)
  if last then return seq_le(seq, last) end
  return gone(typed, read, conn, seq)
end

-- outlive makes key live at least px ms more: its expiry only moves later
-- (PEXPIRE GT, Redis 7.0), so a worker with a shorter ttl never cuts
-- short what a longer-ttl worker wrote, and a key without an expiry (just
-- created: GT takes it as infinite and refuses) gets one (PEXPIRE NX:
-- only a key without an expiry). One call, two when refused; a missing
-- key is left alone.
local function outlive(key, px)
  if redis.call('PEXPIRE', key, px, 'GT') == 0 then
    redis.call('PEXPIRE', key, px, 'NX')
  end
end

-- bury leaves conn's tombstone, seq, in one class (seqs: conn -> seq,
-- ends: conn -> unix ms; gone) until now + keypx, drops up to GONE_PRUNE
-- of the class's ended ones and those beyond GONE_MAX (earliest end
-- first), and keeps both keys at least as long as the latest tombstone
-- (outlive). O(log T) in the class's T tombstones, plus those dropped
-- (each dropped once).
local function bury(seqs, ends, conn, seq, now, keypx)
  redis.call('ZADD', ends, itoa(now + keypx), conn)
  redis.call('HSET', seqs, conn, seq)
  local drop = redis.call('ZRANGEBYSCORE', ends, '-inf', itoa(now), 'LIMIT', 0, GONE_PRUNE)
  local over = redis.call('ZCARD', ends) - #drop - GONE_MAX
  if over > 0 then
    for _, c in ipairs(redis.call('ZRANGE', ends, #drop, #drop + math.min(over, GONE_PRUNE) - 1)) do drop[#drop + 1] = c end
  end
  if #drop > 0 then
    redis.call('ZREM', ends, unpack(drop))
    redis.call('HDEL', seqs, unpack(drop))
  end
  outlive(ends, keypx)
  outlive(seqs, keypx)
end

-- spent lists the seq records of the user hash read whole (all, from
-- HGETALL) that may go: q:<conn> written keypx ms or more before now (a
-- later command of that connection is late, or ordered only while its
-- record lives: docs/protocol.md), and s:<conn> whose connection has no
-- live entry. Field keep is never listed (nil: none).
local function spent(all, now, keypx, keep)
  local live, out = {}, {}
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'c:' and (tonumber(all[i + 1]) or 0) > now then
      live[string.sub(all[i], 3)] = true
    end
  end
  for i = 1, #all, 2 do
    local k, kind = all[i], string.sub(all[i], 1, 2)
    if k ~= keep then
      if kind == 'q:' then
        if (tonumber(string.match(all[i + 1], ' (%d+)$') or '') or 0) + keypx <= now then out[#out + 1] = k end
      elseif kind == 's:' and not live[string.sub(k, 3)] then
        out[#out + 1] = k
      end
    end
  end
  return out
end

-- mark makes the typist key of store keys (typist ~= user; store zset
-- passes the user hash as typist, and mark does nothing) expire at unix
-- ms at, the user's true expiry (their latest live c:<conn>): a hash with
-- field u = enc(user). exact: at is that expiry read from the entries, so
-- the key may move earlier (a stop of one device, a start with a shorter
-- ttl); otherwise at is the expiry of the entry just written and the key
-- only moves later (GT), never below another device's live entry. A key
-- that is missing (an eviction, a new user) is created. One call when the
-- key exists and moves (PEXPIREAT), two when it exists and stays
-- (EXISTS), three when it is created.
local function mark(typist, user, euser, at, exact)
  if typist == user then return end
  local moved
  if exact then
    moved = redis.call('PEXPIREAT', typist, itoa(at)) == 1
  else
    moved = redis.call('PEXPIREAT', typist, itoa(at), 'GT') == 1 or redis.call('EXISTS', typist) == 1
  end
  if not moved then
    redis.call('HSET', typist, 'u', euser)
    redis.call('PEXPIREAT', typist, itoa(at))
  end
end

-- index puts the room in its sweep bucket, due at unix ms due, when the
-- script has the bucket (standalone and Sentinel: KEYS[bucket]); on Redis
-- Cluster the bucket is in another hash slot and the worker does it after
-- the call from the due the script returns (apply.go). LT keeps the
-- earliest due and replaces a sweeper's claim (due.lua).
local function index(bucket, due, enc_room)
  if due > 0 and bucket then
    redis.call('ZADD', bucket, 'LT', itoa(due), enc_room)
  end
end

-- json_str encodes s as a JSON string: '"' and '\' are escaped, control
-- bytes become \u00XX, every other byte (UTF-8 included) is kept. Same on
-- both Lua engines, unlike cjson, whose escaping of '/' differs.
local function json_str(s)
  local out = string.gsub(s, '[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == '\\' then return '\\\\' end
    return string.format('\\u%04x', string.byte(c))
  end)
  return '"' .. out .. '"'
end

-- pct_dec inverts enc(): %XX (upper-case hex) becomes the byte 0xXX.
local function pct_dec(s)
  local out = string.gsub(s, '%%(%x%x)', function(h)
    return string.char(tonumber(h, 16))
  end)
  return out
end

-- entry_ttl is the ttl_ms (as a decimal string) a snapshot gives a
-- typist whose hash field t is t (nil: absent): the ttl of its
-- non-standard entry while that entry's expiry is after now, else ''
-- (the standard ttl: the typist carries no ttl_ms).
local function entry_ttl(t, now)
  if not t then return '' end
  local ttl, at = string.match(t, '^(%d+) (%d+)$')
  if not ttl or tonumber(at) <= now then return '' end
  return ttl
end

-- latest_entry returns the latest expiry (unix ms) of the entries
-- (fields c:<conn>) of a user hash read whole (all, from HGETALL),
-- leaving out field skip (nil: none), 0 when there is none.
local function latest_entry(all, skip)
  local latest = 0
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'c:' and all[i] ~= skip then
      local e = tonumber(all[i + 1]) or 0
      if e > latest then latest = e end
    end
  end
  return latest
end

-- live_until returns the latest expiry (unix ms) of the entries (fields
-- c:<conn>) in the user hash user, leaving out field skip (nil: none), 0
-- when there is none: the user's true expiry, which the users zset's score
-- may lag (INDEX_LAG_MS). O(the hash's fields: lib.lua's header bounds
-- them).
local function live_until(user, skip)
  return latest_entry(redis.call('HGETALL', user), skip)
end

-- tidy is live_until(user) that also deletes the hash's expired entries
-- and spent seq records (the sweep's read of a user whose score ran out).
local function tidy(user, now, keypx)
  local all = redis.call('HGETALL', user)
  local fs = spent(all, now, keypx, nil)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'c:' and (tonumber(all[i + 1]) or 0) <= now then fs[#fs + 1] = all[i] end
  end
  hdel(user, fs)
  return latest_entry(all, nil)
end

-- Thread scopes of a user in a room (docs/protocol.md, "Threads and
-- activities"): field T of the user's room-level hash lists them as
-- "enc(thread) expiry enc(thread) expiry ..." (enc leaves no space), with
-- the latest entry expiry (unix ms) written in each; one whose expiry
-- passed is no longer counted and is dropped at the next write. At most
-- the max threads per user live ones, so reading it is O(that bound).

-- threads_read returns T of hash as a list of {enc(thread), expiry}.
local function threads_read(hash)
  local out = {}
  local t = redis.call('HGET', hash, 'T')
  if not t then return out end
  local k
  for w in string.gmatch(t, '%S+') do
    if k then
      out[#out + 1] = {k, tonumber(w) or 0}
      k = nil
    else
      k = w
    end
  end
  return out
end

-- threads_write stores list (threads_read's shape) in T of hash, leaving
-- out those whose expiry is not above now; deletes T when none is left.
local function threads_write(hash, list, now)
  local parts = {}
  for _, e in ipairs(list) do
    if e[2] > now then
      parts[#parts + 1] = e[1]
      parts[#parts + 1] = itoa(e[2])
    end
  end
  if #parts == 0 then
    redis.call('HDEL', hash, 'T')
  else
    redis.call('HSET', hash, 'T', table.concat(parts, ' '))
  end
end

-- threads_enter records that the user types in thread et until expiry,
-- unless that is a thread beyond max live ones (returns false: refused).
-- The hash lives at least keypx more (outlive).
local function threads_enter(hash, et, expiry, now, max, keypx)
  local list, live, found = threads_read(hash), 0, false
  for _, e in ipairs(list) do
    if e[1] == et then
      found = true
      if expiry > e[2] then e[2] = expiry end
    elseif e[2] > now then
      live = live + 1
    end
  end
  if not found then
    if live >= max then return false end
    list[#list + 1] = {et, expiry}
  end
  threads_write(hash, list, now)
  outlive(hash, keypx)
  return true
end

-- threads_leave drops thread et from the user's list (its scope holds no
-- live entry any more).
local function threads_leave(hash, et, now)
  local list, keep, found = threads_read(hash), {}, false
  for _, e in ipairs(list) do
    if e[1] == et then found = true else keep[#keep + 1] = e end
  end
  if found then threads_write(hash, keep, now) end
end
