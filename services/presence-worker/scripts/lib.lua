-- lib.lua: helpers prepended to every Ellipsis presence-worker script (see
-- store.go). It must run on Redis 7 (Lua 5.1) and on miniredis (gopher-lua),
-- so it uses only the Lua 5.1 base, string, table and math libraries.

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

-- seq_stale applies the per-connection order rule (PROTOCOL.md, "Order"):
-- a command whose seq is not above the last one applied for its connection
-- in this room is stale. Otherwise the seq is recorded in seq_key for px ms.
-- seq '0' means unordered: never stale, never recorded.
local function seq_stale(seq_key, seq, px)
  if seq == '0' then return false end
  local last = redis.call('GET', seq_key)
  if last and seq_le(seq, last) then return true end
  redis.call('SET', seq_key, seq, 'PX', px)
  return false
end

-- user_of returns enc(user) of a room member "enc(user):conn"; enc() never
-- yields ':', so the first ':' ends the user.
local function user_of(member)
  return string.match(member, '^([^:]*):')
end

-- user_members scans the room's sorted set for the members of one user
-- (prefix = enc(user) .. ':'). It returns the number of live members (score >
-- now), all of the user's members (live or expired, not yet swept) and their
-- scores. Cost O(N) in the room's entries: one entry per typing connection.
local function user_members(room, prefix, now)
  local all = redis.call('ZRANGE', room, 0, -1, 'WITHSCORES')
  local n = #prefix
  local live, members, scores = 0, {}, {}
  for i = 1, #all, 2 do
    local m = all[i]
    if string.sub(m, 1, n) == prefix then
      local s = tonumber(all[i + 1])
      members[#members + 1] = m
      scores[m] = s
      if s > now then live = live + 1 end
    end
  end
  return live, members, scores
end

-- zrem_all removes members from a sorted set in chunks (unpack has a stack
-- limit in Lua 5.1).
local function zrem_all(key, members)
  for i = 1, #members, 100 do
    redis.call('ZREM', key, unpack(members, i, math.min(i + 99, #members)))
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
