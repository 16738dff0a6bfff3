-- Lease: two-tier mode's one call. It credits back the unspent units of the
-- pod's previous lease, decides the request's own cost exactly as the
-- algorithm's script would, and, when that is admitted, takes up to `cap`
-- more units for the pod to spend locally. The counter keeps the encoding of
-- the algorithm's exact script (token_bucket.lua, gcra.lua,
-- fixed_window.lua, sliding_window.lua), so switching localTier on or off
-- keeps every counter. With want 0 and credit 0 it is that exact script.
--
-- KEYS[1]  the counter
-- KEYS[2]  the pods leasing from it, in the counter's slot: a hash of
--          pod id -> "reserve lease_expires_us seen_expires_us", pruned
--          here: a pod counts for a ttl after its last call, its reserve
--          while its lease lives
-- ARGV     algorithm (1 TokenBucket, 2 GCRA, 3 SlidingWindow, 4 FixedWindow),
--          limit, period_us, burst, cost, now_us (0: Redis TIME; tests pin the clock),
--          want (extra units asked for), credit (unspent units returned),
--          credit_window (the window the credited units were leased in),
--          pod, bound (most units all pods may hold at once; -1: none),
--          pod_cap (most units one pod may hold), ttl_us,
--          horizon_us (the span of traffic want covers; 0: the ttl)
-- Returns  {allowed, remaining, reset_after_us, retry_after_us, granted,
--          lifetime_us, window, pods}; retry -1 is never. granted units may
--          be spent for lifetime_us from when the call was sent: at most the
--          ttl, and never past the end of the current window.
local alg = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local cost = tonumber(ARGV[5])
local now = tonumber(ARGV[6])
local want = tonumber(ARGV[7])
local credit = tonumber(ARGV[8])
local credit_window = tonumber(ARGV[9])
local pod = ARGV[10]
local bound = tonumber(ARGV[11])
local pod_cap = tonumber(ARGV[12])
local ttl = tonumber(ARGV[13])
local horizon = tonumber(ARGV[14] or 0)
if horizon <= 0 or horizon > ttl then horizon = ttl end
-- A pinned clock (tests only): see token_bucket.lua.
local slack = 3600000
if now == 0 then
  slack = 0
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local eps = 1e-9
local half_micro = 0.5
local epoch = 1577836800000000
local function ceil_us(x) if x <= 0 then return 0 end return math.ceil(x) end
local function floor_tokens(x) if x <= 0 then return 0 end return math.floor(x + eps) end

-- The other pods that served the key within a ttl, and their reserves
-- whose leases are still live: what they may still spend.
local others, held = 0, 0
local pods = redis.call('HGETALL', KEYS[2])
for i = 1, #pods, 2 do
  if pods[i] ~= pod then
    local r, lease_exp, seen_exp = string.match(pods[i + 1], '^(%S+) (%S+) (%S+)$')
    if not seen_exp or tonumber(seen_exp) <= now then
      redis.call('HDEL', KEYS[2], pods[i])
    else
      others = others + 1
      if tonumber(lease_exp) > now then held = held + tonumber(r) end
    end
  end
end

-- The most this pod may hold: what it asked for, its own cap, its fair share
-- of the bound, and what the bound leaves beside the others' reserves.
local cap = math.min(want, pod_cap)
if bound >= 0 then
  cap = math.min(cap, math.floor(bound / (others + 1)), bound - held)
end
local lifetime = ttl
local window = 0

-- Window algorithms: a lease never outlives its window, and a reserve asked
-- for a horizon longer than the time left shrinks with it.
local w, into = 0, 0
if alg == 3 or alg == 4 then
  w = math.floor(now / period)
  if w * period > now then w = w - 1 elseif (w + 1) * period <= now then w = w + 1 end
  into = now - w * period
  window = w
  if period - into < lifetime then lifetime = period - into end
  if lifetime < horizon then cap = math.min(cap, math.floor(want * lifetime / horizon)) end
end
if cap < 0 then cap = 0 end

local allowed, granted, remaining, reset, retry = false, 0, 0, 0, 0
if alg == 1 then
  -- TokenBucket: the stored empty time z, as in token_bucket.lua.
  local period8 = period * 8
  local now8 = (now - epoch) * 8
  local z8 = now8 - burst * period8 / limit
  local stored = redis.call('GET', KEYS[1])
  if stored then z8 = tonumber(stored) end
  local tokens = math.min(burst, math.max(0, (now8 - z8) * limit / period8))
  local round_slack = 0.5 * limit / period8
  local changed = false
  if credit > 0 then
    tokens = math.min(burst, tokens + credit)
    changed = true
  end
  allowed = cost <= tokens + round_slack + eps
  if allowed then
    granted = math.max(0, math.min(cap, floor_tokens(tokens + round_slack - cost)))
    tokens = math.max(0, tokens - cost - granted)
    changed = changed or cost + granted > 0
  end
  if changed then z8 = math.floor(now8 - tokens * period8 / limit + 0.5) end
  reset = ceil_us((z8 + burst * period8 / limit - now8) / 8)
  if changed then
    redis.call('SET', KEYS[1], string.format('%d', z8), 'PX', slack + math.max(1, math.ceil(reset / 1000)))
  end
  remaining = floor_tokens(tokens + round_slack)
  if not allowed then
    if cost > burst then retry = -1 else retry = ceil_us((z8 + cost * period8 / limit - now8) / 8) end
  end
elseif alg == 2 then
  -- GCRA: the theoretical arrival time, as in gcra.lua.
  local interval = period / limit
  local tolerance = burst * interval
  local now8 = (now - epoch) * 8
  local ahead = 0
  local stored = redis.call('GET', KEYS[1])
  if stored then
    stored = tonumber(stored)
    if stored > now8 then ahead = (stored - now8) / 8 end
  end
  local changed = false
  if credit > 0 then
    ahead = math.max(0, ahead - credit * interval)
    changed = true
  end
  local next = ahead + cost * interval
  allowed = next - tolerance <= half_micro
  if allowed then
    granted = math.max(0, math.min(cap, floor_tokens((tolerance - next + half_micro) / interval)))
    ahead = next + granted * interval
    changed = changed or cost + granted > 0
  end
  reset = ceil_us(ahead - half_micro)
  if changed then
    redis.call('SET', KEYS[1], string.format('%d', math.floor(now8 + ahead * 8 + 0.5)),
      'PX', slack + math.max(1, math.ceil(reset / 1000)))
  end
  remaining = floor_tokens((tolerance - ahead + half_micro) / interval)
  if not allowed then
    if cost > burst then retry = -1 else retry = ceil_us(next - tolerance - half_micro) end
  end
elseif alg == 3 then
  -- SlidingWindow: "window current previous", as in sliding_window.lua.
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
  local changed = false
  if credit > 0 then
    -- Units leased in this window come off its count; units leased in the
    -- previous one come off what it weighs now.
    if credit_window == w then
      curr = math.max(0, curr - credit)
      changed = true
    elseif credit_window == w - 1 then
      prev = math.max(0, prev - credit)
      changed = true
    end
  end
  local est = prev * (period - into) / period + curr
  allowed = est + cost <= limit + eps
  if allowed then
    granted = math.max(0, math.min(cap, floor_tokens(limit - est - cost)))
    curr = curr + cost + granted
    est = est + cost + granted
    changed = changed or cost + granted > 0
  end
  if changed then
    redis.call('SET', KEYS[1], string.format('%d %d %d', w, curr, prev),
      'PX', slack + math.max(1, math.ceil((2 * period - into) / 1000)))
  end
  if curr > 0 then reset = 2 * period - into elseif prev > 0 then reset = period - into end
  remaining = floor_tokens(limit - est)
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
else
  -- FixedWindow: "window count", as in fixed_window.lua.
  local count = 0
  local state = redis.call('GET', KEYS[1])
  if state then
    local a, b = string.match(state, '^(%S+) (%S+)$')
    if tonumber(a) == w then count = tonumber(b) end
  end
  local changed = false
  if credit > 0 and credit_window == w then
    count = math.max(0, count - credit)
    changed = true
  end
  allowed = count + cost <= limit
  if allowed then
    granted = math.max(0, math.min(cap, limit - count - cost))
    count = count + cost + granted
    changed = changed or cost + granted > 0
  end
  reset = period - into
  if changed then
    redis.call('SET', KEYS[1], string.format('%d %d', w, count), 'PX', slack + math.max(1, math.ceil(reset / 1000)))
  end
  remaining = math.max(0, limit - count)
  if not allowed then
    if cost > limit then retry = -1 else retry = reset end
  end
end

-- A pod that decides registers what it may still spend until its lease
-- ends, and counts as serving the key for a ttl; a credit-only call (cost
-- 0) deregisters it.
if cost > 0 then
  redis.call('HSET', KEYS[2], pod, string.format('%d %d %d', granted, now + lifetime, now + ttl))
  redis.call('PEXPIRE', KEYS[2], slack + math.ceil(ttl / 1000) + 1)
else
  redis.call('HDEL', KEYS[2], pod)
end
return {allowed and 1 or 0, remaining, reset, retry, granted, lifetime, window, others + 1}
