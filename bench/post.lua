-- wrk script: POST the JSON body in the file named by $WRK_BODY, and print a
-- machine-readable summary line ("WRK_JSON {...}") that bench/bench.py parses.
-- Latencies are in microseconds (wrk's HdrHistogram resolution).

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local path = os.getenv("WRK_BODY")
local f = assert(io.open(path, "rb"), "cannot open WRK_BODY " .. tostring(path))
wrk.body = f:read("*a")
f:close()

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"bytes":%d,"duration_us":%d,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
    '"mean_us":%.1f,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.bytes, summary.duration,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
