-- Token bucket: up to burst tokens, refilled at limit tokens per period,
-- continuously. Mirrors limiter/algo.(Limit).tokenBucket.
--
-- The bucket is one number: the virtual time z at which it was empty, so
-- tokens(now) = min(burst, (now - z) * limit / period). z is an integer count
-- of eighths of a microsecond since epoch, which Redis stores as a bare
-- integer: 72 bytes a key. A credit refills the bucket; a grant empties it
-- further. A forced cost (a settlement's units spent beyond a reservation)
-- is charged past empty: the bucket is then in debt, z ahead of now, and
-- credits and forced costs start from that debt.
local burst = tonumber(ARGV[ARG.burst])
local period8 = period * 8
local now8 = (now - epoch) * 8
local z8 = now8 - burst * period8 / limit -- a fresh bucket is full
local stored = redis.call('GET', key)
if stored then z8 = tonumber(stored) end
local tokens = math.min(burst, math.max(0, (now8 - z8) * limit / period8))
-- z is rounded to an eighth of a us on every write; comparisons forgive
-- that half-eighth so a rounded-down bucket still counts whole tokens.
local round_slack = 0.5 * limit / period8
local changed = credit > 0 or force
if changed then tokens = math.min(tokens, (now8 - z8) * limit / period8) end -- the debt, if any
if credit > 0 then tokens = math.min(burst, tokens + credit) end
local need = cost + headroom -- what must be in the bucket
allowed = force or need <= tokens + round_slack + eps
if allowed then
  if cap > 0 then granted = math.min(cap, floor_tokens(tokens + round_slack - cost)) end
  if force then tokens = tokens - cost else tokens = math.max(0, tokens - cost - granted) end
  changed = changed or cost + granted > 0
end
if changed then z8 = math.floor(now8 - tokens * period8 / limit + 0.5) end
-- Full at z + burst * period / limit; need tokens at z + need * period / limit.
reset = ceil_us((z8 + burst * period8 / limit - now8) / 8)
if changed then redis.call('SET', key, string.format('%d', z8), 'PX', slack + math.max(1, math.ceil(reset / 1000))) end
if not allowed then
  if cost + headroom > burst then retry = -1 else retry = ceil_us((z8 + need * period8 / limit - now8) / 8) end
end
remaining = floor_tokens(tokens + round_slack - headroom)
