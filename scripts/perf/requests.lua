-- Cycles through the request files named in PERF_REQUESTS (comma-separated). Each file holds
-- header lines, a blank line, then the body: one POST per file.
local files = {}
for path in string.gmatch(os.getenv("PERF_REQUESTS") or "", "[^,]+") do
  local f = assert(io.open(path, "rb"))
  local raw = f:read("*a")
  f:close()
  local head, body = raw:match("^(.-)\n\n(.*)$")
  local headers = {}
  for line in head:gmatch("[^\n]+") do
    local name, value = line:match("^([^:]+):%s*(.*)$")
    headers[name] = value
  end
  headers["Content-Length"] = tostring(#body)
  table.insert(files, { headers = headers, body = body })
end
local i = 0
request = function()
  i = i % #files + 1
  local r = files[i]
  return wrk.format("POST", "/api/mcp", r.headers, r.body)
end

-- The 99.9th percentile, which wrk's --latency table leaves out (microseconds).
done = function(summary, latency, requests)
  io.write(string.format("p999_us %d\n", latency:percentile(99.9)))
end
