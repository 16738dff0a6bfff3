-- Prelude: every script starts here. It reads the arguments every entry
-- point shares, fixes the time, and defines the rounding helpers the
-- algorithm cores share with limiter/algo. ALG.<Name> anywhere in the
-- scripts is limiter/algo's ID of that algorithm: scripts.go writes the
-- number in its place, so no script depends on the order of algo's
-- constants.
--
-- ARGV        limit, period_us, burst, cost, now_us (0: Redis TIME; tests
--             pin the clock), read as ARGV[ARG.<name>]: scripts.go names
--             every argument's position once and writes it in place of
--             ARG.<name>, as it does ALG.<Name>.
-- An entry point's own arguments follow, each named in scripts.go. Only the bucket
-- cores read burst: a number parsed costs Redis a few thousand
-- instructions.
--
-- The helpers below are closures made on every call: none captures a
-- local, which would cost Redis a few hundred instructions more each.
local limit = tonumber(ARGV[ARG.limit])
local period = tonumber(ARGV[ARG.period])
local cost = tonumber(ARGV[ARG.cost])
local now = tonumber(ARGV[ARG.now])
-- A pinned clock (tests only) steps synthetic time while little real time
-- passes: keys then live an hour longer, so expiry can't overtake the
-- steps. Stale state decides like a fresh key, so this changes no decision.
local slack = 3600000
if now == 0 then
  slack = 0
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- What follows reads no argument: the multi script (multi.lua) runs it
-- once for all its decisions.
--[[shared]]
-- As in limiter/algo: eps absorbs floating-point noise when token counts
-- are compared or floored, so that 2.9999999999999996 tokens count as 3;
-- sub-microsecond differences of GCRA's offsets count as zero; bucket times
-- are stored in eighths of a us since 2020-01-01 (epoch, in us).
local eps = 1e-9
local half_micro = 0.5
local epoch = 1577836800000000
local function ceil_us(x) if x <= 0 then return 0 end return math.ceil(x) end
local function floor_tokens(x) if x <= 0 then return 0 end return math.floor(x + 1e-9) end -- eps

-- window_at is the index of the window of p us that holds t (us),
-- aligned to the Unix epoch, and how far into it t is. Division in floats
-- may land one off at a window's edge; the comparisons correct it.
local function window_at(t, p)
  local w = math.floor(t / p)
  if w * p > t then w = w - 1 elseif (w + 1) * p <= t then w = w + 1 end
  return w, t - w * p
end

-- The algorithm cores (*_core.lua) come next: scripts.go puts an entry
-- point's core, or cores, where the entry point says. A core is a block,
-- not a function, so that it captures no local (see above). It reads
--   key            the counter
--   credit         units given back, granted in credit_window (window
--                  algorithms drop a credit to a window that has passed)
--   cap            the most units it may grant beyond cost
--   force          charge cost whatever the limit says (a settlement's
--                  units spent beyond their reservation)
--   count_denied   count a denied cost too (FixedWindow only; see
--                  limiter/algo.Limit.CountDenied); false but in exact.lua
--   headroom        the units cost must leave (priority shedding; see
--                  limiter/algo.Limit.Headroom); 0 when granting
--   cal_start, cal_end, cal_next
--                  a calendar FixedWindow's bounds (fixed_window_core.lua);
--                  0 for none
-- and the prelude's limit, period, cost and now. It gives the credit
-- back, decides cost exactly as limiter/algo.(Limit).Take, and when cost is
-- admitted grants up to cap more units; every write sets a TTL. It assigns
--   allowed, remaining, reset, retry, granted
-- (reset and retry in us, retry -1 for never), and the window cores also
--   win            the index of the window that holds now (what a
--                  reservation records, for its credit to find it)
-- which the entry point declares as false and zeros, and never returns. With credit 0 and cap 0
-- it is the exact decision.
