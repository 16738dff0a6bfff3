-- Exact: a decision by one algorithm's core, with nothing leased, and
-- idempotent when asked. The script is the prelude, then this with the
-- algorithm's core in its place.
--
-- KEYS[1]  the counter, in the core's encoding
-- KEYS[2]  optional: the record of a retried request's first admitted
--          decision, a string "remaining reset_at_us expires_us replays"
--          (records written before replays were counted lack the last
--          field: none yet). Its key carries the counter's hash tag, so it
--          lives in the counter's slot.
-- ARGV     limit, period_us, burst, cost, now_us (see prelude.lua), and with
--          KEYS[2] the record's TTL in ms and the most replays it answers
--          (else 0, 0); then, when either is set, the start and end of a
--          calendar FixedWindow's window at the limiter's time and the end
--          of the next, in us (see fixed_window_core.lua; else 0, 0, 0), and
--          the reserve the decision must leave (priority shedding; else 0)
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
local live = false
if KEYS[2] then
  local rec = redis.call('GET', KEYS[2])
  if rec then
    local remaining, reset_at, expires, replays = string.match(rec, '^(%S+) (%S+) (%S+) ?(%d*)$')
    -- Expiry is also checked here, in script time, so a pinned test clock
    -- expires records as Redis's own TTL does in production.
    if expires and tonumber(expires) > now then
      replays = tonumber(replays) or 0
      if replays < tonumber(ARGV[7]) then
        redis.call('SET', KEYS[2], string.format('%s %s %s %d', remaining, reset_at, expires, replays + 1), 'KEEPTTL')
        return {1, tonumber(remaining), math.max(0, tonumber(reset_at) - now), 0, 1}
      end
      live = true
    end
  end
end

local key, credit, credit_window, cap = KEYS[1], 0, 0, 0
local cal_start, cal_end, cal_next, reserve = 0, 0, 0, 0
if ARGV[8] then
  cal_start, cal_end, cal_next, reserve = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
end
local allowed, remaining, reset, retry, granted = false, 0, 0, 0, 0
-- scripts.go puts the algorithm's core here, in a do ... end block:
--[[core]]

if KEYS[2] and not live and allowed and cost > 0 then
  local ttl = tonumber(ARGV[6])
  redis.call('SET', KEYS[2], string.format('%d %d %d 0', remaining, now + reset, now + ttl * 1000), 'PX', slack + ttl)
end
return {allowed and 1 or 0, remaining, reset, retry}
