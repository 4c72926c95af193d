-- POSTs one JSON body, read from the file named by the environment variable BENCH_BODY_FILE,
-- on every request. Used by bench/run.ts for svc (POST /svc) and PostGraphile (POST /graphql):
--   BENCH_BODY_FILE=body.json wrk -t2 -c10 -d10s --latency -s bench/wrk/post.lua http://127.0.0.1:PORT/svc
local path = os.getenv("BENCH_BODY_FILE")
if path == nil or path == "" then
  error("BENCH_BODY_FILE is not set")
end
local f = assert(io.open(path, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json"
