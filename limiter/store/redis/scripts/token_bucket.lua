-- Token bucket: up to burst tokens, refilled at limit tokens per period,
-- continuously. Mirrors limiter/algo.(Limit).tokenBucket.
--
-- The bucket is one number: the virtual time z at which it was empty, so
-- tokens(now) = min(burst, (now - z) * limit / period). z is an integer count
-- of eighths of a microsecond since 2020-01-01, which Redis stores as a bare
-- integer: 72 bytes a key.
--
-- KEYS[1]  the bucket's z
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
local epoch = 1577836800000000
local function ceil_us(x) if x <= 0 then return 0 end return math.ceil(x) end
local function floor_tokens(x) if x <= 0 then return 0 end return math.floor(x + eps) end

local period8 = period * 8
local now8 = (now - epoch) * 8
local z8 = now8 - burst * period8 / limit
local stored = redis.call('GET', KEYS[1])
if stored then z8 = tonumber(stored) end

local tokens = math.min(burst, math.max(0, (now8 - z8) * limit / period8))
-- z is rounded to an eighth of a us on every write; comparisons forgive
-- that half-eighth so a rounded-down bucket still counts whole tokens.
local round_slack = 0.5 * limit / period8
local allowed = cost <= tokens + round_slack + eps
if allowed and cost > 0 then
  tokens = math.max(0, tokens - cost)
  z8 = math.floor(now8 - tokens * period8 / limit + 0.5)
end
local reset = ceil_us((z8 + burst * period8 / limit - now8) / 8)
if allowed and cost > 0 then
  redis.call('SET', KEYS[1], string.format('%d', z8), 'PX', slack + math.max(1, math.ceil(reset / 1000)))
end

local retry = 0
if not allowed then
  if cost > burst then retry = -1 else retry = ceil_us((z8 + cost * period8 / limit - now8) / 8) end
end
return idempotent_record({allowed and 1 or 0, floor_tokens(tokens + round_slack), reset, retry}, cost, now, slack)
