-- GCRA: one theoretical arrival time (TAT) per key, emission interval
-- period/limit, tolerance of burst requests. Mirrors limiter/algo.(Limit).gcra:
-- the arithmetic works on offsets from now (ahead), and sub-microsecond
-- differences count as zero, because TATs near 1.7e15us are only exact to a
-- quarter us. The TAT is stored like the token bucket's z: an integer count
-- of eighths of a us since epoch, 72 bytes a key. A credit moves the TAT
-- back; a grant moves it on; a forced cost moves it on past the tolerance.
local burst = tonumber(ARGV[ARG.burst])
local interval = period / limit
local tolerance = burst * interval
local now8 = (now - epoch) * 8
local ahead = 0
local stored = redis.call('GET', key)
if stored then
  stored = tonumber(stored)
  if stored > now8 then ahead = (stored - now8) / 8 end
end
local changed = credit > 0
if changed then ahead = math.max(0, ahead - credit * interval) end
local next = ahead + cost * interval
local need = next + headroom * interval -- the TAT that must fit
allowed = force or need - tolerance <= half_micro
if allowed then
  if cap > 0 then granted = math.min(cap, floor_tokens((tolerance - next + half_micro) / interval)) end
  ahead = next + granted * interval
  changed = changed or cost + granted > 0
end
reset = ceil_us(ahead - half_micro)
if changed then
  redis.call('SET', key, string.format('%d', math.floor(now8 + ahead * 8 + 0.5)), 'PX', slack + math.max(1, math.ceil(reset / 1000)))
end
if not allowed then
  if cost + headroom > burst then retry = -1 else retry = ceil_us(need - tolerance - half_micro) end
end
remaining = floor_tokens((tolerance - ahead + half_micro) / interval - headroom)
