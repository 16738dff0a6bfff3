-- Sliding window, the weighted two-window counter: the previous window's
-- count weighted by its overlap with the sliding window, plus the current
-- window's count. Mirrors limiter/algo.(Limit).slidingWindow.
--
-- The key holds both windows, a string "window_index current previous".
-- Units credited back come off the count of the window they were granted
-- in: the current one, or the previous one (what it weighs now). A forced
-- cost counts past the limit.
local w, into = window_at(now, period)
win = w
local curr, prev = 0, 0
local state = redis.call('GET', key)
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
  if credit_window == w then
    curr = math.max(0, curr - credit)
    changed = true
  elseif credit_window == w - 1 then
    prev = math.max(0, prev - credit)
    changed = true
  end
end
local weight = (period - into) / period
local est = prev * weight + curr
local lim = limit - headroom -- what this request may fill
allowed = force or est + cost <= lim + eps
if allowed then
  if cap > 0 then granted = math.min(cap, floor_tokens(limit - est - cost)) end
  curr = curr + cost + granted
  est = est + cost + granted
  changed = changed or cost + granted > 0
end
if changed then
  redis.call('SET', key, string.format('%d %d %d', w, curr, prev), 'PX', slack + math.max(1, math.ceil((2 * period - into) / 1000)))
end
if curr > 0 then reset = 2 * period - into elseif prev > 0 then reset = period - into end
if not allowed then
  local need = lim - cost -- usage that may remain for cost to fit
  if cost > lim then
    retry = -1
  elseif curr <= need and prev > 0 then
    -- The previous window decays enough before this one ends.
    retry = ceil_us((period - into) - (need - curr) * period / prev)
  else
    -- Wait into the next window, where this window's count decays.
    retry = (period - into) + ceil_us(period - need * period / curr)
  end
end
remaining = floor_tokens(lim - est)
