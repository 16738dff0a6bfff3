-- GCRA: one theoretical arrival time (TAT) per key, emission interval
-- period/limit, tolerance of burst requests. Mirrors limiter/algo.(Limit).gcra:
-- the arithmetic works on offsets from now, and sub-microsecond differences
-- count as zero, because TATs near 1.7e15us are only exact to a quarter us.
--
-- KEYS[1]  the TAT
-- KEYS[2]  optional idempotency record (see idempotency.lua, prepended)
-- ARGV     limit, period_us, burst, cost, now_us (0: Redis TIME; tests pin the clock), record_ttl_ms
-- Returns  {allowed, remaining, reset_after_us, retry_after_us[, replayed]}; retry -1 is never.
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
-- A pinned clock (tests only) steps synthetic time while little real time
-- passes: keys then live an hour longer, so expiry can't overtake the
-- steps. Stale state decides like a fresh key, so this changes no decision.
local slack = 3600000
if now == 0 then
  slack = 0
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local replay = idempotent_replay(now)
if replay then return replay end
local eps = 1e-9
local half_micro = 0.5
local function ceil_us(x) if x <= 0 then return 0 end return math.ceil(x) end
local function floor_tokens(x) if x <= 0 then return 0 end return math.floor(x + eps) end

local interval = period / limit
local tolerance = burst * interval
-- The TAT is stored as an integer count of eighths of a us since 2020-01-01,
-- which Redis keeps as a bare integer: 72 bytes a key.
local now8 = (now - 1577836800000000) * 8
local ahead = 0
local stored = redis.call('GET', KEYS[1])
if stored then
  stored = tonumber(stored)
  if stored > now8 then ahead = (stored - now8) / 8 end
end

local next = ahead + cost * interval
local allowed = next - tolerance <= half_micro
if allowed and cost > 0 then
  ahead = next
  local reset = ceil_us(ahead - half_micro)
  redis.call('SET', KEYS[1], string.format('%d', math.floor(now8 + ahead * 8 + 0.5)),
    'PX', slack + math.max(1, math.ceil(reset / 1000)))
end

local retry = 0
if not allowed then
  if cost > burst then retry = -1 else retry = ceil_us(next - tolerance - half_micro) end
end
return idempotent_record({allowed and 1 or 0, floor_tokens((tolerance - ahead + half_micro) / interval),
  ceil_us(ahead - half_micro), retry}, cost, now, slack)
