-- Exact: a decision by one algorithm's core, with nothing leased, and
-- idempotent when asked. The script is the prelude, then this with the
-- algorithm's core in its place.
--
-- KEYS[1]  the counter, in the core's encoding
-- KEYS[2]  optional: the counter's idempotency records, a hash from a
--          record's name to "remaining reset_at_us expires_us replays",
--          each a retried request's first admitted decision
-- KEYS[3]  with KEYS[2]: their index, a sorted set of names by expiry (us)
--          All three share the counter's hash tag, so they live in one slot.
-- ARGV     limit, period_us, burst, cost, now_us (see prelude.lua), and with
--          KEYS[2]: the record's TTL in ms, the most replays it answers,
--          the most records of the counter, and the record's name
-- Returns  {allowed, remaining, reset_after_us, retry_after_us[, replayed]};
--          retry -1 is never.
--
-- A live record with replays left counts one more and replays its
-- decision, {1, remaining, reset_after_us, 0, 1} (the fifth value marks a
-- replay), and the script consumes nothing. A live record whose replays are
-- spent stays until its TTL, and the request is decided afresh without
-- recording: reusing a key buys a bounded number of free answers. Only
-- admitted decisions that consumed units are recorded: a denial or a peek
-- consumed nothing, so its retry is decided afresh. The record is written by
-- the same script as the decision: no second round trip, no window between.
-- Recording drops up to 8 expired records of the counter, then, while the
-- counter holds its most records, the one closest to expiry: made-up keys
-- can't grow a counter's records without bound, and the work per call
-- stays O(log n).
local live = false
if KEYS[2] then
  local rec = redis.call('HGET', KEYS[2], ARGV[9])
  if rec then
    local remaining, reset_at, expires, replays = string.match(rec, '^(%S+) (%S+) (%S+) (%d+)$')
    -- Expiry is also checked here, in script time, so a pinned test clock
    -- expires records as Redis's own TTL does in production.
    if expires and tonumber(expires) > now then
      replays = tonumber(replays)
      if replays < tonumber(ARGV[7]) then
        redis.call('HSET', KEYS[2], ARGV[9], string.format('%s %s %s %d', remaining, reset_at, expires, replays + 1))
        return {1, tonumber(remaining), math.max(0, tonumber(reset_at) - now), 0, 1}
      end
      live = true
    end
  end
end

local key, credit, credit_window, cap, force = KEYS[1], 0, 0, 0, false
local allowed, remaining, reset, retry, granted = false, 0, 0, 0, 0
-- scripts.go puts the algorithm's core here, in a do ... end block:
--[[core]]

if KEYS[2] and not live and allowed and cost > 0 then
  local ttl = tonumber(ARGV[6])
  local expires = now + ttl * 1000
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 8)
  if #gone > 0 then
    redis.call('HDEL', KEYS[2], unpack(gone))
    redis.call('ZREM', KEYS[3], unpack(gone))
  end
  if not redis.call('ZSCORE', KEYS[3], ARGV[9]) and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[8]) then
    local oldest = redis.call('ZPOPMIN', KEYS[3])
    redis.call('HDEL', KEYS[2], oldest[1])
  end
  redis.call('HSET', KEYS[2], ARGV[9], string.format('%d %d %d 0', remaining, now + reset, expires))
  redis.call('ZADD', KEYS[3], expires, ARGV[9])
  -- Each key lives as long as its newest record.
  local keep = slack + ttl
  for i = 2, 3 do
    if redis.call('PTTL', KEYS[i]) < keep then
      redis.call('PEXPIRE', KEYS[i], keep)
    end
  end
end
return {allowed and 1 or 0, remaining, reset, retry}
