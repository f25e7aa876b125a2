-- wrk script: POST /v1/qa with questions rotating through QUESTIONS_FILE
-- (one question per line), so the load is not one cached request repeated.
local questions = {}
local path = os.getenv("QUESTIONS_FILE")
for line in io.lines(path) do
  if #line > 0 then table.insert(questions, line) end
end
local counter = 0
-- READER (extractive, llama, ...) names the reader; unset, the server's default answers.
local reader = os.getenv("READER")
local reader_field = reader and (',"reader":"' .. reader .. '"') or ""

local function escape(s)
  return s:gsub('\\', '\\\\'):gsub('"', '\\"')
end

request = function()
  counter = counter + 1
  local q = questions[(counter % #questions) + 1]
  local body = '{"question":"' .. escape(q) .. '","k":5' .. reader_field .. '}'
  return wrk.format("POST", "/v1/qa", {["Content-Type"] = "application/json"}, body)
end

done = function(summary, latency, requests)
  io.write(string.format(
    "JSON {\"requests\":%d,\"duration_s\":%.3f,\"rps\":%.1f,\"errors_status\":%d,\"errors_connect\":%d,\"errors_read\":%d,\"errors_write\":%d,\"errors_timeout\":%d,\"p50_ms\":%.2f,\"p90_ms\":%.2f,\"p99_ms\":%.2f,\"max_ms\":%.2f}\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    summary.errors.status, summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
