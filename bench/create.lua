-- wrk script: POST /plants with a unique id per request.
-- Environment: BENCH_TOKEN (a valid token), BENCH_FIRST_ID (the first id of this run).
-- Thread k (of at most 16) takes ids first + k + 16 n, so no two requests share an id.
local token = os.getenv("BENCH_TOKEN")
local first = tonumber(os.getenv("BENCH_FIRST_ID") or "1")
local counter = 0

function setup(thread)
  thread:set("index", counter)
  counter = counter + 1
end

function init(args)
  n = 0
end

local headers = {
  ["Authorization"] = "Bearer " .. (token or ""),
  ["Content-Type"] = "application/json",
}

function request()
  local id = first + index + n * 16
  n = n + 1
  return wrk.format("POST", "/plants", headers,
    '{"id":' .. string.format("%d", id) .. ',"name":"bench plant","tag":"bench"}')
end

function done(summary, latency, requests)
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"seconds":%.3f,"status":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,"p50":%.1f,"p90":%.1f,"p99":%.1f,"max":%.1f}\n',
    summary.requests, summary.duration / 1e6, summary.errors.status, summary.errors.connect,
    summary.errors.read, summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
