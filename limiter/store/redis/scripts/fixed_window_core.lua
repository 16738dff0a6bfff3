-- Fixed window: at most limit units per window of period, aligned to the
-- Unix epoch, or per calendar window. Mirrors limiter/algo.(Limit).fixedWindow.
--
-- The key holds the window, a string "window_index count". Units credited
-- back come off the count if they were granted in this window; a credit to
-- a window that has passed is dropped. A forced cost counts past the limit.
-- With count_denied (limiter/algo.Limit.CountDenied, envoyproxy/ratelimit's
-- counting), a denied cost counts too.
--
-- A calendar window (cal_end > 0) is not computed here: the limiter sends
-- the bounds of the window that holds its own time, cal_start to cal_end,
-- and the end of the next, cal_next (limiter/algo.Calendar.Window), and
-- Redis time picks one of the two. Its index is its start.
local w, into
if cal_end > 0 then
  if now >= cal_end then
    w, period = cal_end, cal_next - cal_end
  else
    w, period = cal_start, cal_end - cal_start
  end
  into = now - w
else
  w, into = window_at(now, period)
end
win = w
local count = 0
local state = redis.call('GET', key)
if state then
  local a, b = string.match(state, '^(%S+) (%S+)$')
  if tonumber(a) == w then count = tonumber(b) end
end
local changed = false
if credit > 0 and credit_window == w then
  count = math.max(0, count - credit)
  changed = true
end
local lim = limit - headroom -- what this request may fill
allowed = force or count + cost <= lim
if allowed then
  if cap > 0 then granted = math.min(cap, limit - count - cost) end
  count = count + cost + granted
  changed = changed or cost + granted > 0
elseif count_denied then
  count = count + cost
  changed = changed or cost > 0
end
reset = period - into
if changed then redis.call('SET', key, string.format('%d %d', w, count), 'PX', slack + math.max(1, math.ceil(reset / 1000))) end
if not allowed then
  if cost > lim then retry = -1 else retry = reset end
end
remaining = math.max(0, lim - count)
