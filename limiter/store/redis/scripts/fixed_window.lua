-- Fixed window: at most limit units per window of period, aligned to the
-- Unix epoch. Mirrors limiter/algo.(Limit).fixedWindow.
--
-- KEYS[1]  the window, a string "window_index count"
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

local w = math.floor(now / period)
if w * period > now then w = w - 1 elseif (w + 1) * period <= now then w = w + 1 end
local into = now - w * period

local count = 0
local state = redis.call('GET', KEYS[1])
if state then
  local a, b = string.match(state, '^(%S+) (%S+)$')
  if tonumber(a) == w then count = tonumber(b) end
end

local allowed = count + cost <= limit
local reset = period - into
if allowed and cost > 0 then
  count = count + cost
  redis.call('SET', KEYS[1], string.format('%d %d', w, count), 'PX', slack + math.max(1, math.ceil(reset / 1000)))
end

local retry = 0
if not allowed then
  if cost > limit then retry = -1 else retry = reset end
end
return idempotent_record({allowed and 1 or 0, math.max(0, limit - count), reset, retry}, cost, now, slack)
