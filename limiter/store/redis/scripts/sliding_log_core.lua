-- Sliding log: one sorted-set entry per admitted unit, scored by its time;
-- entries older than period leave the window. Exact, with memory
-- proportional to limit. Mirrors limiter/algo.(Limit).slidingLog.
--
-- The key is a sorted set of "now_us:n" members scored by now_us. The log
-- is never leased (it would lose its exactness), so it takes no credit and
-- grants nothing.
local pruned = redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - period))
local count = redis.call('ZCARD', key)
local lim = limit - reserve -- what this request may fill
allowed = count + cost <= lim
if allowed and cost > 0 then
  -- Members are unique per unit: the time plus the log's size after it.
  local args, added = {}, 0
  for i = 1, cost do
    args[#args + 1] = string.format('%d', now)
    args[#args + 1] = string.format('%d:%d', now, count + i)
    if #args >= 1000 or i == cost then
      added = added + redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  -- A member can only clash after the clock went backwards; add the rest
  -- under suffixed names so every admitted unit is logged.
  local n = 0
  while added < cost do
    n = n + 1
    added = added + redis.call('ZADD', key, string.format('%d', now), string.format('%d:%d:%d', now, count + cost, n))
  end
  count = count + cost
end

local function score_at(i)
  return tonumber(redis.call('ZRANGE', key, i, i, 'WITHSCORES')[2])
end

if count > 0 then
  reset = score_at(-1) + period - now
  if (allowed and cost > 0) or pruned > 0 then redis.call('PEXPIRE', key, slack + math.max(1, math.ceil(reset / 1000))) end
end
if not allowed then
  if cost > lim then retry = -1 else retry = score_at(count + cost - lim - 1) + period - now end
end
remaining = math.max(0, lim - count)
