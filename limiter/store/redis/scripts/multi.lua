-- Multi: a round trip's exact decisions in one script run, on a
-- standalone server (multi.go). Each decision is decided by the exact
-- script of its algorithm (the prelude, exact.lua and its core), made a
-- function here, so each decides exactly as that script would alone; what
-- the decisions share is one EVALSHA and one reply, Redis TIME read
-- once, and the parsing of arguments they have in common (a policy's
-- limit and period, a cost of 1): tonumber of an argument is m_num here.
--
-- KEYS     each decision's KEYS, in turn, as exact.lua takes them
-- ARGV     each decision's header, alg + 16 * nkeys + 256 * nargs, then its
--          nargs arguments as exact.lua takes them
-- Returns  6 integers per decision, in turn: allowed, remaining,
--          reset_after_us, retry_after_us, replayed, penalized (those
--          exact.lua leaves out are 0); a decision that failed has its
--          error reply in place of allowed, and fails alone.
--
-- scripts.go writes the prelude's shared part here, then one function per
-- algorithm, m_decide[ALG.<Name>](m_base, m_k, m_nk, m_na), whose arguments are
-- ARGV[m_base + i] and KEYS[m_k + i]: m_na ARGV and m_nk KEYS. The names of
-- this script start with m_, which the exact scripts do not use.
--[[shared]]
-- Redis TIME, read once, for every decision of the run that asks it.
local m_clock_now = nil
local function m_clock()
  if not m_clock_now then
    local t = redis.call('TIME')
    m_clock_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return m_clock_now
end
-- m_num is tonumber, remembering what it parsed: a number parsed costs Redis
-- a few thousand instructions, a string found in a table a few hundred,
-- and a run's decisions mostly share their policies' arguments. It holds
-- at most one entry per argument of the run.
local m_parsed = {}
local function m_num(s)
  local v = m_parsed[s]
  if v == nil then
    v = tonumber(s)
    if v ~= nil then m_parsed[s] = v end
  end
  return v
end
local m_decide = {}
--[[deciders]]
local out, o, k, j, n = {}, 0, 0, 0, #ARGV
while o < n do
  local h = m_num(ARGV[o + 1])
  local alg, nk, na = h % 16, math.floor(h / 16) % 16, math.floor(h / 256)
  local f = m_decide[alg]
  local ok, r
  if f then
    ok, r = pcall(f, o + 1, k, nk, na)
  else
    ok, r = false, 'multi: no exact script for algorithm ' .. alg
  end
  if ok then
    out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = r[1], r[2], r[3], r[4], r[5] or 0, r[6] or 0
  else
    if type(r) == 'table' and r.err then r = r.err end
    out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = {err = tostring(r)}, 0, 0, 0, 0, 0
  end
  o, k, j = o + 1 + na, k + nk, j + 6
end
return out
