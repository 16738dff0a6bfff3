-- Token bucket: up to burst tokens, refilled at limit tokens per period,
-- continuously. Mirrors limiter/algo.(Limit).tokenBucket.
--
-- KEYS[1]  the bucket, a string "tokens stamp_us"
-- ARGV     limit, period_us, burst, cost, now_us (0: Redis TIME; tests pin the clock)
-- Returns  {allowed, remaining, reset_after_us, retry_after_us}; retry -1 is never.
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
local eps = 1e-9
local function ceil_us(x) if x <= 0 then return 0 end return math.ceil(x) end
local function floor_tokens(x) if x <= 0 then return 0 end return math.floor(x + eps) end

local tokens, stamp = burst, now
local state = redis.call('GET', KEYS[1])
if state then
  local a, b = string.match(state, '^(%S+) (%S+)$')
  tokens, stamp = tonumber(a), tonumber(b)
end
if now > stamp then
  tokens = math.min(burst, tokens + (now - stamp) * limit / period)
  stamp = now
end

local allowed = cost <= tokens + eps
if allowed and cost > 0 then
  tokens = math.max(0, tokens - cost)
end
-- Refill restarts from stamp, which is ahead of now if the clock went back.
local ahead = stamp - now
local reset = ceil_us((burst - tokens) * period / limit + ahead)
if allowed and cost > 0 then
  redis.call('SET', KEYS[1], string.format('%.17g %d', tokens, stamp),
    'PX', slack + math.max(1, math.ceil(reset / 1000)))
end

local retry = 0
if not allowed then
  if cost > burst then retry = -1 else retry = ceil_us((cost - tokens) * period / limit + ahead) end
end
return {allowed and 1 or 0, floor_tokens(tokens), reset, retry}
