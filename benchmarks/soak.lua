-- The load of benchmarks/bench_soak.py: wrk runs this against one replica.
--
-- Run with one connection per thread (wrk -t N -c N), so that each thread's request()
-- and response() alternate and a response is known to answer the last request sent.
-- Searches are drawn from a Zipf stream over the questions of the data file
-- (SOAK_DATA, written by bench_soak.py: request bodies, relevant documents, the
-- cumulative Zipf weights). After a search, with probability SOAK_CLICK the user clicks
-- by a position-based model (examined at rank r with probability 1 / r, clicked when
-- examined with probability 0.7 for a document the labels call relevant, 0.05 for
-- another), posted to /v1/events in one body; with probability SOAK_FEEDBACK the top
-- result gets an explicit label on /v1/feedback. A follow-up that fails (a status other
-- than 202, or a connection closed before its answer) is posted again 1 s later, up to
-- 120 times (a retried click is stored once: the store keys it). A search whose
-- connection closed before its answer is logged with status 0 (once for a run of
-- reconnect tries). While the connection keeps closing, the thread waits before each
-- reconnect try: 50 ms, doubling to 1 s, until an answer comes.
--
-- Pacing: SOAK_RATE searches a second for this wrk process (0: as fast as the
-- connections go), spread over its threads; request() waits for the next free slot of
-- its thread before a search (follow-ups go at once). A thread late by more than a
-- second does not burst to catch up. The wait is a poll() inside request(), never wrk's
-- delay(): wrk arms a timer per delay() and keeps it across a reconnect, so a connection
-- closed during a delay (the replica killed) re-armed one more timer per reconnect try,
-- and each stale timer that fired later, with a request in flight, made wrk call
-- request() and send a second request on that connection: the answers then came one
-- request late (a search's 200 read as a click's, the last search's answer read by no
-- one), so searches the replica logged were never seen answered. With no delay(), wrk
-- calls request() once per answer and once per (re)connect, nothing else.
--
-- From SOAK_STOP_AT (epoch seconds) on, no new search is sent: the follow-ups still
-- queued are posted (retried as above), and an idle thread asks GET /healthz once a second
-- (not logged) until wrk's duration ends.
--
-- Every answer is logged, one line per request, to SOAK_LOG.<thread> (tab-separated:
-- kind, sent and done in epoch seconds, status, search id or click count, version,
-- attempt). done() writes wrk's socket error counts to SOAK_LOG.errors.

local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_usec; } soak_timeval;
  int gettimeofday(soak_timeval *tv, void *tz);
  int poll(void *fds, unsigned long nfds, int timeout);
]]
local tv = ffi.new("soak_timeval")
local function now()
  ffi.C.gettimeofday(tv, nil)
  return tonumber(tv.tv_sec) + tonumber(tv.tv_usec) / 1e6
end

local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
  table.insert(threads, thread)
end

local data, log, rate, click_share, feedback_share, replica
local queue = {}        -- follow-ups: {path, body, kind, n, attempt, ready}
local inflight = nil    -- the request sent and not answered yet
local next_slot = 0
local stop_at = math.huge  -- no new search after this (SOAK_STOP_AT): follow-ups drain
local interval = 0
local serial = 0
local calls = 0
local failing = false  -- the last search's connection failed, no answer since
local backoff = 0      -- ms this thread waits before its next reconnect try (0: none)
local json_headers = {["Content-Type"] = "application/json"}

function init(args)
  data = dofile(os.getenv("SOAK_DATA"))
  log = io.open(os.getenv("SOAK_LOG") .. "." .. tid, "w")
  log:setvbuf("line")
  rate = tonumber(os.getenv("SOAK_RATE") or "0")
  click_share = tonumber(os.getenv("SOAK_CLICK") or "0.3")
  feedback_share = tonumber(os.getenv("SOAK_FEEDBACK") or "0.02")
  replica = os.getenv("SOAK_REPLICA") or "r"
  local nthreads = tonumber(os.getenv("SOAK_THREADS") or "1")
  stop_at = tonumber(os.getenv("SOAK_STOP_AT") or "") or math.huge
  if rate > 0 then interval = nthreads / rate end
  math.randomseed(tonumber(os.getenv("SOAK_SEED") or "0") * 1000 + tid)
  next_slot = now() + math.random() * interval
end

local function draw()
  local u, lo, hi = math.random(), 1, #data.cdf
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if data.cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return lo
end

local function ready_item()
  local t = now()
  for i, item in ipairs(queue) do
    if item.ready <= t then return i end
  end
  return nil
end

-- ms to wait before the next request: none while a follow-up is ready, else this
-- thread's next search slot (after SOAK_STOP_AT: 200 ms while follow-ups are queued, else
-- 1 s, then a /healthz)
local function pace()
  if ready_item() ~= nil then return 0 end
  local t = now()
  if t >= stop_at then return #queue > 0 and 200 or 1000 end
  if interval <= 0 then return 0 end
  if next_slot < t - 1 then next_slot = t end
  local wait = next_slot - t
  next_slot = next_slot + interval
  if wait < 0 then return 0 end
  return wait * 1000
end

local function retry(item)
  if item.attempt < 120 then
    item.attempt = item.attempt + 1
    item.ready = now() + 1
    table.insert(queue, item)
  else
    log:write(string.format("%s_lost\t%.6f\t%.6f\t0\t%d\t\t%d\n", item.kind, now(), now(),
                            item.n, item.attempt))
  end
end

function request()
  calls = calls + 1
  if calls == 2 and tid == 1 then
    inflight = nil  -- wrk calls the first thread's request() once before connecting (to
                    -- check the request), and sends nothing of it
  end
  if inflight ~= nil and inflight.kind == "search" then
    -- its connection closed before an answer came: a failed search (status 0), logged
    -- once for a run of failures (wrk asks request() again at every reconnect try while
    -- the replica is down, and sends nothing of those; its error counts have them)
    if not failing then
      log:write(string.format("search\t%.6f\t%.6f\t0\t\t\t%d\n", inflight.sent, now(),
                              inflight.q))
    end
    failing = true
  elseif inflight ~= nil and inflight.kind ~= "idle" then
    retry(inflight)  -- its connection closed before an answer came
  end
  if inflight ~= nil then
    -- the connection closed before an answer: wrk reconnects at once and asks again, a
    -- tight loop while the replica is down; wait first, 50 ms doubling to 1 s (this
    -- thread's one connection is down anyway), so the measurement is not the generator's
    backoff = math.min(backoff > 0 and backoff * 2 or 50, 1000)
    ffi.C.poll(nil, 0, backoff)
  elseif not (calls == 1 and tid == 1) then
    local wait = pace()  -- this thread's one connection is idle until it sends
    if wait > 0 then ffi.C.poll(nil, 0, math.floor(wait + 0.5)) end
  end
  local i = ready_item()
  if i ~= nil then
    inflight = table.remove(queue, i)
    if inflight.attempt == 1 then
      log:write(string.format("%s_sent\t%.6f\t%.6f\t0\t%d\t\t1\n", inflight.kind, now(),
                              now(), inflight.n))
    end
  elseif now() >= stop_at then
    inflight = {kind = "idle", path = "/healthz", attempt = 1}
    inflight.sent = now()
    return wrk.format("GET", "/healthz")
  else
    local q = draw()
    inflight = {kind = "search", path = "/v1/search", body = data.bodies[q], q = q,
                attempt = 1}
  end
  inflight.sent = now()
  return wrk.format("POST", inflight.path, json_headers, inflight.body)
end

local function relevant(q, doc)
  local rel = data.rel[q]
  return rel ~= nil and rel[doc] == true
end

local function follow_ups(item, body)
  local sid = string.match(body, '"search_id": *"([^"]+)"')
  local list = string.match(body, '"ids": *%[(.-)%]')
  if sid == nil or list == nil then return sid end
  local ids = {}
  for d in string.gmatch(list, '"([^"]*)"') do table.insert(ids, d) end
  if math.random() < click_share then
    serial = serial + 1
    local session = string.format("%s-%d-%d", replica, tid, serial)
    local events = {}
    for r, d in ipairs(ids) do
      local attract = relevant(item.q, d) and 0.7 or 0.05
      if math.random() < (1 / r) * attract then
        table.insert(events, string.format(
          '{"search_id": "%s", "doc_id": "%s", "type": "click", "session_id": "%s"}',
          sid, d, session))
      end
    end
    if #events > 0 then
      table.insert(queue, {kind = "click", path = "/v1/events", n = #events, attempt = 1,
                           ready = 0, body = "[" .. table.concat(events, ", ") .. "]"})
    end
  end
  if #ids > 0 and math.random() < feedback_share then
    local label = relevant(item.q, ids[1]) and 1 or 0
    table.insert(queue, {kind = "feedback", path = "/v1/feedback", n = 1, attempt = 1,
                         ready = 0, body = string.format(
      '{"search_id": "%s", "doc_id": "%s", "label": %d}', sid, ids[1], label)})
  end
  return sid
end

function response(status, headers, body)
  local item = inflight
  inflight = nil
  failing = false
  backoff = 0
  if item == nil then return end
  local t = now()
  if item.kind == "idle" then return end
  if item.kind == "search" then
    local sid, version = "", ""
    if status == 200 then
      sid = follow_ups(item, body) or ""
      version = string.match(body, '"version": *"([^"]*)"') or "raw"
    end
    log:write(string.format("search\t%.6f\t%.6f\t%d\t%s\t%s\t%d\n", item.sent, t, status,
                            sid, version, item.q))
  else
    log:write(string.format("%s\t%.6f\t%.6f\t%d\t%d\t\t%d\n", item.kind, item.sent, t,
                            status, item.n, item.attempt))
    if status ~= 202 then retry(item) end
  end
end

function done(summary, latency, requests)
  local f = io.open(os.getenv("SOAK_LOG") .. ".errors", "w")
  local e = summary.errors
  f:write(string.format('{"connect": %d, "read": %d, "write": %d, "status": %d, ' ..
                        '"timeout": %d, "requests": %d}\n', e.connect, e.read, e.write,
                        e.status, e.timeout, summary.requests))
  f:close()
end
