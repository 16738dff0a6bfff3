-- Hold: a decision that holds what it takes until it is settled, and its
-- settlement. The script is the prelude, then this with one algorithm's
-- core in its place: Concurrency's, whose leases live in the counter, or
-- a rate algorithm's, whose reservation is a record beside the counter.
-- Mirrors limiter/store/memory's takeHold and Settle.
--
-- KEYS[1]  the counter
-- KEYS[2]  a reservation's record (not for Concurrency), in the counter's
--          slot: a string "units window expires_us"
-- ARGV     the prelude's (see prelude.lua), then in the order of
--          scripts.go's hold* constants: op ('take' or 'settle'), hold (the
--          holding's ID), hold_ttl (the record's TTL in us, take), actual
--          (the cost, settle; negative: at the estimate); then, sent only
--          when set: cal_start, cal_end, cal_next (a calendar FixedWindow's
--          windows, as in exact.lua), headroom (priority shedding; a
--          settlement's credit and forced charge ignore it). No penalty:
--          the API refuses spec.penalty with Concurrency and spec.reserve.
-- Returns  {allowed, remaining, reset_after_us, retry_after_us, found,
--          held}; retry -1 is never. found is 1 when a settle ended a live
--          holding of held units (1 for a lease).
--
-- take: Concurrency acquires a slot for the ID (a cost of 0 peeks); a rate
-- algorithm decides cost, and when it admits units records them under the
-- ID, added to a live record of the same ID, in the window of now.
-- settle: Concurrency releases the ID's slot; a rate algorithm ends the
-- record, credits back what it reserved beyond the actual cost (to the
-- window it was taken in) or charges what was spent beyond it, even past
-- the limit. A holding that is not live changes nothing: the core peeks.
local key, credit, credit_window, cap, force, win = KEYS[1], 0, 0, 0, false, 0
local cal_start, cal_end, cal_next, headroom = 0, 0, 0, 0
local count_denied = false
if ARGV[ARG.cal_start] then
  cal_start, cal_end, cal_next, headroom = tonumber(ARGV[ARG.cal_start]), tonumber(ARGV[ARG.cal_end]), tonumber(ARGV[ARG.cal_next]), tonumber(ARGV[ARG.headroom])
end
local allowed, remaining, reset, retry, granted = false, 0, 0, 0, 0
local hold, found, held = ARGV[ARG.hold], 0, 0
local op = 'peek'
if ARGV[ARG.op] == 'settle' then
  cost = 0
  if KEYS[2] then
    local rec = redis.call('GET', KEYS[2])
    if rec then
      -- Ended: a mark that reads as no record, gone in a millisecond (the
      -- store's ACL user has no DEL).
      redis.call('SET', KEYS[2], '-', 'PX', 1)
      local units, w, expires = string.match(rec, '^(%S+) (%S+) (%S+)$')
      -- Expiry is checked in script time too, so a pinned test clock
      -- expires records as Redis's own TTL does in production.
      if expires and tonumber(expires) > now then
        found, held = 1, tonumber(units)
        local actual = tonumber(ARGV[ARG.actual])
        if actual < 0 then actual = held end
        if actual < held then
          credit, credit_window = held - actual, tonumber(w)
        elseif actual > held then
          cost, force = actual - held, true
        end
      end
    end
  else
    op = 'release'
  end
elseif cost > 0 then
  op = 'acquire'
end
-- scripts.go puts the algorithm's core here, in a do ... end block:
--[[core]]

if found == 1 and not KEYS[2] then held = 1 end
if ARGV[ARG.op] == 'take' and KEYS[2] and allowed and cost > 0 then
  local ttl = tonumber(ARGV[ARG.hold_ttl])
  local units = cost
  local rec = redis.call('GET', KEYS[2])
  if rec then
    local u, _, expires = string.match(rec, '^(%S+) (%S+) (%S+)$')
    if expires and tonumber(expires) > now then units = units + tonumber(u) end
  end
  -- In the window the core decided in (a calendar window's start; the
  -- buckets have none and ignore it).
  redis.call('SET', KEYS[2], string.format('%d %d %d', units, win, now + ttl), 'PX', slack + math.max(1, math.ceil(ttl / 1000)))
end
return {allowed and 1 or 0, remaining, reset, retry, found, held}
