-- wrk script: blocking v0.3 `message/send`, one unique messageId per request.
--
-- `wrk -s bench/send.lua URL -- NONCE TEXT`: the messageId is NONCE-THREAD-SEQ, so no two requests of a
-- run (or of two runs with different nonces) share one. Every response must be HTTP 200 with a completed
-- task and no JSON-RPC error; the others are counted as `bad`. `done` prints one line
-- `BENCH_RESULT {json}` (latencies in microseconds) and, if any response was bad, `BENCH_SAMPLE ...`.

local threads = {}
local next_tid = 1

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
  table.insert(threads, thread)
end

function init(args)
  nonce = args[1] or tostring(os.time())
  text = args[2] or "hello"
  seq = 0
  bad = 0
  sample = ""
  headers = { ["Content-Type"] = "application/json" }
end

function request()
  seq = seq + 1
  local body = string.format(
    '{"jsonrpc":"2.0","id":%d,"method":"message/send","params":{"message":{"kind":"message",'
      .. '"messageId":"%s-%d-%d","role":"user","parts":[{"kind":"text","text":"%s"}]}}}',
    seq, nonce, tid, seq, text
  )
  return wrk.format("POST", nil, headers, body)
end

function response(status, _, body)
  if status ~= 200 or not string.find(body, '"state":%s*"completed"') or string.find(body, '"error"%s*:') then
    bad = bad + 1
    if sample == "" then
      sample = tostring(status) .. " " .. string.sub(body or "", 1, 400)
    end
  end
end

function done(summary, latency, _)
  local total_bad = 0
  local first_sample = ""
  for _, t in ipairs(threads) do
    total_bad = total_bad + t:get("bad")
    local s = t:get("sample")
    if first_sample == "" and s ~= nil and s ~= "" then
      first_sample = s
    end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,'
      .. '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},"bad":%d,'
      .. '"latency_us":{"min":%d,"mean":%.1f,"max":%d,"stdev":%.1f,'
      .. '"p50":%d,"p90":%d,"p99":%d,"p99.9":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout, total_bad,
    latency.min, latency.mean, latency.max, latency.stdev,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)
  ))
  if first_sample ~= "" then
    io.write("BENCH_SAMPLE " .. string.gsub(first_sample, "\n", " ") .. "\n")
  end
end
