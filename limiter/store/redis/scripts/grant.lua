-- Grant: two-tier mode's one call. It credits back the unspent units of the
-- pod's previous grant, decides the request's own cost exactly as the
-- exact script would, and, when that is admitted, takes up to `cap` more
-- units for the pod to spend locally. The script is the prelude, then this
-- with the cores of every grantable algorithm in their place, each in the
-- branch of its ID. The counter keeps the core's encoding, so switching
-- localTier on or off keeps every counter. With want 0 and credit 0 it is
-- the exact script.
--
-- KEYS[1]  the counter
-- KEYS[2]  the pods holding grants on it, in the counter's slot: a hash of
--          pod id -> "reserve grant_expires_us seen_expires_us", pruned
--          here: a pod counts for a ttl after its last call, its reserve
--          while its grant lives
-- ARGV     the prelude's (see prelude.lua), then in the order of
--          scripts.go's grant* constants: algorithm (an ALG id), want (extra units asked for),
--          credit (unspent units returned),
--          credit_window (the window the credited units were granted in),
--          pod, bound (most units all pods may hold at once; -1: none),
--          pod_cap (most units one pod may hold), ttl_us,
--          horizon_us (the span of traffic want covers; 0: the ttl)
-- Returns  {allowed, remaining, reset_after_us, retry_after_us, granted,
--          lifetime_us, window, pods}; retry -1 is never. granted units may
--          be spent for lifetime_us from when the call was sent: at most the
--          ttl, and never past the end of the current window.
local algorithm = tonumber(ARGV[ARG.algorithm])
local want = tonumber(ARGV[ARG.want])
local credit = tonumber(ARGV[ARG.credit])
local credit_window = tonumber(ARGV[ARG.credit_window])
local count_denied = false
local pod = ARGV[ARG.pod]
local bound = tonumber(ARGV[ARG.bound])
local pod_cap = tonumber(ARGV[ARG.pod_cap])
local ttl = tonumber(ARGV[ARG.ttl])
local horizon = tonumber(ARGV[ARG.horizon] or 0)
if horizon <= 0 or horizon > ttl then horizon = ttl end

-- The other pods that served the key within a ttl, and their reserves
-- whose grants are still live: what they may still spend.
local others, held = 0, 0
local pods = redis.call('HGETALL', KEYS[2])
for i = 1, #pods, 2 do
  if pods[i] ~= pod then
    local r, grant_exp, seen_exp = string.match(pods[i + 1], '^(%S+) (%S+) (%S+)$')
    if not seen_exp or tonumber(seen_exp) <= now then
      redis.call('HDEL', KEYS[2], pods[i])
    else
      others = others + 1
      if tonumber(grant_exp) > now then held = held + tonumber(r) end
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

-- Window algorithms: a grant never outlives its window, and a reserve asked
-- for a horizon longer than the time left shrinks with it.
if algorithm == ALG.SlidingWindow or algorithm == ALG.FixedWindow then
  local into
  window, into = window_at(now, period)
  if period - into < lifetime then lifetime = period - into end
  if lifetime < horizon then cap = math.min(cap, math.floor(want * lifetime / horizon)) end
end
if cap < 0 then cap = 0 end

local key, force, win = KEYS[1], false, 0
local allowed, remaining, reset, retry, granted = false, 0, 0, 0, 0
-- Calendar windows and headrooms are never granted (the API refuses
-- localTier with a calendar or priority shedding).
local cal_start, cal_end, cal_next, headroom = 0, 0, 0, 0
-- scripts.go puts here one branch per grantable algorithm, on its ID,
-- holding its core; an unknown ID is an error reply:
--[[cores]]

-- A pod that decides registers what it may still spend until its grant
-- ends, and counts as serving the key for a ttl; a credit-only call (cost
-- 0) deregisters it.
if cost > 0 then
  redis.call('HSET', KEYS[2], pod, string.format('%d %d %d', granted, now + lifetime, now + ttl))
  redis.call('PEXPIRE', KEYS[2], slack + math.ceil(ttl / 1000) + 1)
else
  redis.call('HDEL', KEYS[2], pod)
end
return {allowed and 1 or 0, remaining, reset, retry, granted, lifetime, window, others + 1}
