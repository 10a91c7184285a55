-- wrk script: POST /plants with a unique id per request.
-- Environment: BENCH_TOKEN (a valid token), BENCH_FIRST_ID (the first id of this run),
-- BENCH_RANDOM=1 for ids at random over the int64 range instead.
-- Thread k (of at most 16) takes ids first + k + 16 n, so no two requests share an id. At random,
-- two ids meet once in about 10^19 requests.
local token = os.getenv("BENCH_TOKEN")
local first_text = os.getenv("BENCH_FIRST_ID") or "1"
local first = tonumber(first_text)
local counter = 0
local random = os.getenv("BENCH_RANDOM") == "1"

function setup(thread)
  thread:set("index", counter)
  counter = counter + 1
end

-- The first id modulo a prime, from its digits: exact at any size (a double's `%` is not past
-- 2^53, where two first ids 10^12 apart gave the same seed, so the same ids at random).
local function first_mod(p)
  local r = 0
  for digit in first_text:gmatch("%d") do
    r = (r * 10 + tonumber(digit)) % p
  end
  return r
end

function init(args)
  n = 0
  -- Two runs at once (instances on two nodes) have different first ids, so different ids.
  math.randomseed(os.time() * 1000 + index * 7919 + first_mod(1000003))
end

-- A sign and a number uniform in [0, 9 * 10^18): the first of 19 digits is 0 to 8, and leading
-- zeros are dropped (JSON allows none). So the ids spread over nearly all of the int64 range, as
-- the growth part's fill does (LuaJIT's numbers are doubles, hence the digits one by one).
local function random_id()
  local digits = { tostring(math.random(0, 8)) }
  for i = 1, 6 do
    digits[#digits + 1] = string.format("%03d", math.random(0, 999))
  end
  local text = table.concat(digits):gsub("^0+", "")
  if text == "" then
    return "0"
  end
  return (math.random(0, 1) == 0 and "-" or "") .. text
end

local headers = {
  ["Authorization"] = "Bearer " .. (token or ""),
  ["Content-Type"] = "application/json",
}

function request()
  local id
  if random then
    id = random_id()
  else
    id = string.format("%d", first + index + n * 16)
  end
  n = n + 1
  return wrk.format("POST", "/plants", headers,
    '{"id":' .. id .. ',"name":"bench plant","tag":"bench"}')
end

function done(summary, latency, requests)
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"seconds":%.3f,"status":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,"p50":%.1f,"p90":%.1f,"p99":%.1f,"max":%.1f}\n',
    summary.requests, summary.duration / 1e6, summary.errors.status, summary.errors.connect,
    summary.errors.read, summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
