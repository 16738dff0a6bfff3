-- Exact: a decision by one algorithm's core, with nothing granted,
-- idempotent when asked, and with a penalty when the policy has one. The
-- script is the prelude, then this with the algorithm's core in its place.
--
-- KEYS[1]  the counter, in the core's encoding
-- KEYS[2]  with a record TTL (record_ttl > 0): the counter's idempotency
--          records, a hash from a record's name to "remaining reset_at_us
--          expires_us replays", each a retried request's first admitted
--          decision
-- KEYS[3]  with KEYS[2]: their index, a sorted set of names by expiry (us)
-- KEYS[#]  with a penalty (penalty_duration > 0), last: the counter's penalty, a
--          string "until_us since_us strikes" (limiter/algo.PenaltyState)
--          All share the counter's hash tag, so they live in one slot.
-- ARGV     the prelude's (see prelude.lua); then, in the order of
--          scripts.go's exact* constants, each group sent only when it or
--          a later one is set (else zeros, and an empty name):
--          record_ttl (ms), max_replays, max_records, record: the
--                 record's TTL, the most replays it answers, the most
--                 records of the counter, and the record's name
--          cal_start, cal_end, cal_next: the start and end of a calendar
--                 FixedWindow's window at the limiter's time and the end of
--                 the next, in us (see fixed_window_core.lua)
--          headroom: what the decision must leave (priority shedding)
--          penalty_duration (us), penalty_after (denials),
--                 penalty_within (us)
-- Returns  {allowed, remaining, reset_after_us, retry_after_us[, replayed
--          [, penalized]]}; retry -1 is never.
--
-- A penalized key is denied first, whatever it asks: {0, 0, left_us,
-- left_us, 0, 1}, where left is the penalty's time left; nothing else is
-- read or written. Otherwise a denial of a cost above 0, with no unit
-- left and no priority headroom, counts as a strike (limiter/algo.Limit.
-- Strikes, Penalty.Strike): the after-th strike within within_us of
-- the count's first penalizes the key for duration_us, and the denial is
-- answered as penalized; the next count starts when the penalty ends. The
-- penalty's key expires when it is fresh again.
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
--
-- (Absent arguments are tested before any is parsed: a call into
-- tonumber costs Redis a few hundred instructions.)
local pen_dur, pen_key, pen_state = 0, nil, nil
local pen_until, pen_since, pen_strikes = 0, 0, 0
if ARGV[ARG.penalty_duration] then pen_dur = tonumber(ARGV[ARG.penalty_duration]) end
if pen_dur > 0 then
  pen_key = KEYS[#KEYS]
  pen_state = redis.call('GET', pen_key)
  if pen_state then
    local a, b, c = string.match(pen_state, '^(%S+) (%S+) (%S+)$')
    pen_until, pen_since, pen_strikes = tonumber(a), tonumber(b), tonumber(c)
    if pen_until > now then
      return {0, 0, pen_until - now, pen_until - now, 0, 1}
    end
  end
end

local records = ARGV[ARG.record_ttl] and ARGV[ARG.record_ttl] ~= '0'
local live = false
if records then
  local rec = redis.call('HGET', KEYS[2], ARGV[ARG.record])
  if rec then
    local remaining, reset_at, expires, replays = string.match(rec, '^(%S+) (%S+) (%S+) (%d+)$')
    -- Expiry is also checked here, in script time, so a pinned test clock
    -- expires records as Redis's own TTL does in production.
    if expires and tonumber(expires) > now then
      replays = tonumber(replays)
      if replays < tonumber(ARGV[ARG.max_replays]) then
        redis.call('HSET', KEYS[2], ARGV[ARG.record], string.format('%s %s %s %d', remaining, reset_at, expires, replays + 1))
        return {1, tonumber(remaining), math.max(0, tonumber(reset_at) - now), 0, 1}
      end
      live = true
    end
  end
end

local key, credit, credit_window, cap, force, win = KEYS[1], 0, 0, 0, false, 0
local cal_start, cal_end, cal_next, headroom = 0, 0, 0, 0
local count_denied = ARGV[ARG.count_denied] == '1'
if ARGV[ARG.cal_start] then
  cal_start, cal_end, cal_next, headroom = tonumber(ARGV[ARG.cal_start]), tonumber(ARGV[ARG.cal_end]), tonumber(ARGV[ARG.cal_next]), tonumber(ARGV[ARG.headroom])
end
local allowed, remaining, reset, retry, granted = false, 0, 0, 0, 0
-- scripts.go puts the algorithm's core here, in a do ... end block:
--[[core]]

-- A strike (limiter/algo.Limit.Strikes): a denial of a cost above 0 with
-- not even one unit left (a cost above what remains is never a strike), at
-- the full capacity (a priority share's denial is never a strike).
if pen_key and not allowed and cost > 0 and headroom == 0 and remaining == 0 then
  local within = tonumber(ARGV[ARG.penalty_within])
  if not pen_state or pen_since > now or pen_since + within <= now then
    pen_since, pen_strikes = now, 0
  end
  pen_strikes = pen_strikes + 1
  if pen_strikes >= tonumber(ARGV[ARG.penalty_after]) then
    pen_until = now + pen_dur
    redis.call('SET', pen_key, string.format('%d %d 0', pen_until, pen_until), 'PX', slack + math.ceil((pen_dur + within) / 1000))
    return {0, 0, pen_dur, pen_dur, 0, 1}
  end
  redis.call('SET', pen_key, string.format('%d %d %d', pen_until, pen_since, pen_strikes),
    'PX', slack + math.max(1, math.ceil((pen_since + within - now) / 1000)))
end

if records and not live and allowed and cost > 0 then
  local ttl = tonumber(ARGV[ARG.record_ttl])
  local expires = now + ttl * 1000
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 8)
  if #gone > 0 then
    redis.call('HDEL', KEYS[2], unpack(gone))
    redis.call('ZREM', KEYS[3], unpack(gone))
  end
  if not redis.call('ZSCORE', KEYS[3], ARGV[ARG.record]) and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[ARG.max_records]) then
    local oldest = redis.call('ZPOPMIN', KEYS[3])
    redis.call('HDEL', KEYS[2], oldest[1])
  end
  redis.call('HSET', KEYS[2], ARGV[ARG.record], string.format('%d %d %d 0', remaining, now + reset, expires))
  redis.call('ZADD', KEYS[3], expires, ARGV[ARG.record])
  -- Each key lives as long as its newest record.
  local keep = slack + ttl
  for i = 2, 3 do
    if redis.call('PTTL', KEYS[i]) < keep then
      redis.call('PEXPIRE', KEYS[i], keep)
    end
  end
end
return {allowed and 1 or 0, remaining, reset, retry}
