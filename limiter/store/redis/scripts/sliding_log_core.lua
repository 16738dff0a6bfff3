-- Sliding log, weighted: one sorted-set member per admitted request,
-- whatever its cost, scored by its time; entries older than period leave
-- the window. Exact, with memory proportional to the requests logged (at
-- most limit). Mirrors limiter/algo.(Limit).slidingLog.
--
-- A member is named "total:cost", total being the running total of units
-- logged up to and including it, in the log's order, zero-padded to 15
-- digits so that members of one time sort by it. The units in the window
-- are the newest total less the oldest's total before it (its total less
-- its cost), and the entry whose units must leave for cost to fit is found
-- by a binary search on the totals: no step walks the log or grows with
-- cost, but pruning, which removes each member once, and an insertion
-- behind newer members (the clock went back), which renames them.
--
-- The log is never granted (it would lose its exactness), so it takes no
-- credit and grants nothing.
local pruned = redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - period))
local n = redis.call('ZCARD', key)

-- The total, cost and time of the member at rank i.
local function entry_at(i)
  local m = redis.call('ZRANGE', key, i, i, 'WITHSCORES')
  local total, c = string.match(m[1], '^(%d+):(%d+)$')
  return tonumber(total), tonumber(c), tonumber(m[2])
end

local base, count, newest = 0, 0, 0
if n > 0 then
  local total, c = entry_at(0)
  base = total - c
  total, c, newest = entry_at(-1)
  count = total - base
end
local lim = limit - headroom -- what this request may fill
allowed = count + cost <= lim
if allowed and cost > 0 then
  local prev = base + count
  if n > 0 and newest > now then
    -- The clock went back: insert before the newer members, whose totals
    -- move up by cost.
    local later = redis.call('ZRANGEBYSCORE', key, '(' .. string.format('%d', now), '+inf', 'WITHSCORES')
    for i = 1, #later, 2 do
      local total, c = string.match(later[i], '^(%d+):(%d+)$')
      total, c = tonumber(total), tonumber(c)
      if i == 1 then prev = total - c end
      redis.call('ZREM', key, later[i])
      redis.call('ZADD', key, later[i + 1], string.format('%015d:%d', total + cost, c))
    end
  else
    newest = now
  end
  redis.call('ZADD', key, string.format('%d', now), string.format('%015d:%d', prev + cost, cost))
  count = count + cost
  n = n + 1
end

if count > 0 then
  reset = newest + period - now
  if (allowed and cost > 0) or pruned > 0 then redis.call('PEXPIRE', key, slack + math.max(1, math.ceil(reset / 1000))) end
end
if not allowed then
  if cost > lim then
    retry = -1
  else
    -- The oldest count+cost-lim units must leave: the first member whose
    -- total reaches them.
    local k, lo, hi = base + count + cost - lim, 0, n - 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if entry_at(mid) >= k then hi = mid else lo = mid + 1 end
    end
    local _, _, at = entry_at(lo)
    retry = at + period - now
  end
end
remaining = math.max(0, lim - count)
