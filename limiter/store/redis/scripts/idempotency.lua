-- Idempotency: prepended to every algorithm's script, which calls
-- idempotent_replay once it knows the time and returns through
-- idempotent_record.
--
-- KEYS[2]  optional: the record of a retried request's first admitted
--          decision, a string "remaining reset_at_us expires_us". Its key
--          carries the counter's hash tag, so it lives in the counter's slot.
-- ARGV[6]  with KEYS[2]: the record's TTL in ms.
--
-- A live record replays its decision, {1, remaining, reset_after_us, 0, 1}
-- (the fifth value marks a replay), and the script consumes nothing. Only
-- admitted decisions that consumed units are recorded: a denial or a peek
-- consumed nothing, so its retry is decided afresh. The record is written by
-- the same script as the decision: no second round trip, no window between.
local function idempotent_replay(now)
  if not KEYS[2] then return nil end
  local rec = redis.call('GET', KEYS[2])
  if not rec then return nil end
  local remaining, reset_at, expires = string.match(rec, '^(%S+) (%S+) (%S+)$')
  -- Expiry is also checked here, in script time, so a pinned test clock
  -- expires records as Redis's own TTL does in production.
  if not expires or tonumber(expires) <= now then return nil end
  return {1, tonumber(remaining), math.max(0, tonumber(reset_at) - now), 0, 1}
end

local function idempotent_record(reply, cost, now, slack)
  if KEYS[2] and reply[1] == 1 and cost > 0 then
    local ttl = tonumber(ARGV[6])
    redis.call('SET', KEYS[2], string.format('%d %d %d', reply[2], now + reply[3], now + ttl * 1000),
      'PX', slack + ttl)
  end
  return reply
end

