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
--   e, z   the typing_start / typing_stop event a suppressed transition
--          leaves for the sweeper (the trailing edge)
--   i      the user's score in the room's users zset (unix ms) as last
--          written by these scripts, '0' after they removed the user
--   s:<conn> last applied seq of conn
--   c:<conn> expiry (unix ms) of conn's entry
--
-- Store keys also keeps the typist key typing:{R}:enc(user) while the user
-- is in the room's users zset (mark).
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

-- mark creates or renews the typist key of store keys (typist ~= user;
-- store zset passes the user hash as typist, and mark does nothing): a
-- hash with field u = enc(user), expiring keypx ms from now like the user
-- hash. start.lua calls it when it adds the user to the users zset and
-- wherever it renews the user hash, at least once per refresh window, so
-- the key lives while the user is in the zset; stop.lua and sweep.lua
-- delete it when they remove the user. A SCAN of the room's typist keys
-- therefore finds every visible typist; the snapshot keeps those the
-- users zset holds with a live entry (layout.go). One call when the key
-- exists (PEXPIRE), three when it does not (an eviction, a new user).
local function mark(typist, user, euser, keypx)
  if typist ~= user and redis.call('PEXPIRE', typist, keypx) == 0 then
    redis.call('HSET', typist, 'u', euser)
    redis.call('PEXPIRE', typist, keypx)
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

-- live_until returns the latest expiry (unix ms) of the entries (fields
-- c:<conn>) in the user hash user, leaving out field skip (nil: none), 0
-- when there is none: the user's true expiry, which the users zset's score
-- may lag (INDEX_LAG_MS). O(the user's connections and seq fields).
local function live_until(user, skip)
  local all = redis.call('HGETALL', user)
  local latest = 0
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'c:' and all[i] ~= skip then
      local e = tonumber(all[i + 1]) or 0
      if e > latest then latest = e end
    end
  end
  return latest
end
