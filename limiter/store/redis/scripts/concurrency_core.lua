-- Concurrency: at most limit leases live at once, each freeing itself
-- period after it was taken. Mirrors limiter/algo.(Limit).concurrency.
--
-- The key is a sorted set of lease IDs scored by their expiry (us). The
-- entry point sets hold, the lease's ID, and op: 'acquire' takes a slot
-- for hold (renewing a lease it holds already), 'release' gives hold's
-- back and sets found, anything else peeks. Expired leases are dropped
-- first. A lease is one slot whatever cost says; leases take no credit and
-- grant nothing. A new lease must leave headroom slots free (priority
-- shedding); a priority with no share (headroom >= limit) never gets one.
local pruned = redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
local count = redis.call('ZCARD', key)
local held = false
if op ~= 'peek' then held = redis.call('ZSCORE', key, hold) end
allowed = true
local changed = pruned > 0
if op == 'acquire' then
  allowed = held or count + 1 <= limit - headroom
  if allowed then
    redis.call('ZADD', key, string.format('%d', now + period), hold)
    if not held then count = count + 1 end
    changed = true
  end
elseif op == 'release' and held then
  redis.call('ZREM', key, hold)
  count = count - 1
  found = 1
  changed = true
end
if count > 0 then
  reset = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) - now
  if changed then redis.call('PEXPIRE', key, slack + math.max(1, math.ceil(reset / 1000))) end
  if not allowed and headroom < limit then
    retry = math.min(1000000, tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]) - now) -- algo.ConcurrencyRetry
  end
end
if not allowed and headroom >= limit then retry = -1 end
remaining = math.max(0, limit - headroom - count)
