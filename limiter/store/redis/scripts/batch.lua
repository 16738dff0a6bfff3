-- Batch: many decisions in one script call, on a standalone server only (a
-- batch's keys span slots). One call instead of one per decision saves
-- Redis its per-command work: parsing, script lookup, setting up KEYS and
-- ARGV, the reply.
--
-- The store prepends take[a] for every algorithm a: that algorithm's script
-- (with idempotency.lua), unchanged, as function(KEYS, ARGV). So each
-- decision runs the very code a per-key EVALSHA runs, on the same strings.
--
-- KEYS     every decision's KEYS, in order
-- ARGV     per decision: its algorithm, its KEYS count (1, or 2 with an
--          idempotency record), then its script's ARGV (4 + KEYS count values)
-- Returns  one reply per decision, in order: its script's reply, or an error
--          reply when that decision failed; the others still run.
local replies = {}
local k, a = 1, 1
while a <= #ARGV do
  local algorithm, nkeys = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local keys, argv = {}, {}
  for i = 1, nkeys do keys[i] = KEYS[k + i - 1] end
  for i = 1, 4 + nkeys do argv[i] = ARGV[a + 1 + i] end
  local ok, reply = pcall(take[algorithm], keys, argv)
  if not ok then
    if type(reply) ~= 'table' then reply = redis.error_reply(tostring(reply)) end
  end
  replies[#replies + 1] = reply
  k, a = k + nkeys, a + 6 + nkeys
end
return replies
