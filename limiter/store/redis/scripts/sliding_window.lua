-- Sliding window, the weighted two-window counter: the previous window's
-- count weighted by its overlap with the sliding window, plus the current
-- window's count. Mirrors limiter/algo.(Limit).slidingWindow.
--
-- KEYS[1]  both windows, a string "window_index current previous"
-- KEYS[2]  optional idempotency record (see idempotency.lua, prepended)
-- ARGV     limit, period_us, burst (unused), cost, now_us (0: Redis TIME; tests pin the clock), record_ttl_ms
-- Returns  {allowed, remaining, reset_after_us, retry_after_us[, replayed]}; retry -1 is never.
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
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
local function ceil_us(x) if x <= 0 then return 0 end return math.ceil(x) end
local function floor_tokens(x) if x <= 0 then return 0 end return math.floor(x + eps) end

local w = math.floor(now / period)
if w * period > now then w = w - 1 elseif (w + 1) * period <= now then w = w + 1 end
local into = now - w * period

local curr, prev = 0, 0
local state = redis.call('GET', KEYS[1])
if state then
  local a, b, c = string.match(state, '^(%S+) (%S+) (%S+)$')
  a = tonumber(a)
  if a == w then
    curr, prev = tonumber(b), tonumber(c)
  elseif a == w - 1 then
    prev = tonumber(b)
  end
end

local weight = (period - into) / period
local est = prev * weight + curr
local allowed = est + cost <= limit + eps
if allowed and cost > 0 then
  curr = curr + cost
  est = est + cost
  redis.call('SET', KEYS[1], string.format('%d %d %d', w, curr, prev),
    'PX', slack + math.max(1, math.ceil((2 * period - into) / 1000)))
end

local reset = 0
if curr > 0 then reset = 2 * period - into elseif prev > 0 then reset = period - into end

local retry = 0
if not allowed then
  local need = limit - cost
  if cost > limit then
    retry = -1
  elseif curr <= need and prev > 0 then
    retry = ceil_us((period - into) - (need - curr) * period / prev)
  else
    retry = (period - into) + ceil_us(period - need * period / curr)
  end
end
return idempotent_record({allowed and 1 or 0, floor_tokens(limit - est), reset, retry}, cost, now, slack)
