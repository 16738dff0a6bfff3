-- Sliding log: one sorted-set entry per admitted unit, scored by its time;
-- entries older than period leave the window. Exact, with memory
-- proportional to limit. Mirrors limiter/algo.(Limit).slidingLog.
--
-- KEYS[1]  the log, a sorted set of "now_us:n" members scored by now_us
-- KEYS[2]  optional idempotency record (see idempotency.lua, prepended)
-- ARGV     limit, period_us, burst (unused), cost, now_us (0: Redis TIME; tests pin the clock), record_ttl_ms
-- Returns  {allowed, remaining, reset_after_us, retry_after_us[, replayed]}; retry -1 is never.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local cost = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
-- A pinned clock (tests only) steps synthetic time while little real time
-- passes: keys then live an hour longer, so expiry can't overtake the
-- steps. Stale state decides like a fresh key, so this changes no decision.
local slack = 3600000
if now == 0 then
  slack = 0
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local replay = idempotent_replay(now)
if replay then return replay end

local pruned = redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - period))
local count = redis.call('ZCARD', key)
local allowed = count + cost <= limit
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

local reset = 0
if count > 0 then
  reset = score_at(-1) + period - now
  if (allowed and cost > 0) or pruned > 0 then
    redis.call('PEXPIRE', key, slack + math.max(1, math.ceil(reset / 1000)))
  end
end

local retry = 0
if not allowed then
  if cost > limit then retry = -1 else retry = score_at(count + cost - limit - 1) + period - now end
end
return idempotent_record({allowed and 1 or 0, math.max(0, limit - count), reset, retry}, cost, now, slack)
