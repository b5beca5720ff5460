-- wrk script of scripts/bench-proxy: POST /v1/completions with ~1,000-token prompts, 16 shared
-- prefixes (~950 tokens each) and a question unique to every request (~50 tokens), built at
-- request time so that no two bodies are equal (the gateway's tokenizer caches whole segments:
-- a pool of bodies cycled over would be served from that cache after the first lap).
-- Usage: wrk -s request.lua URL -- KIND MODEL [MAX_TOKENS]
--   KIND: text (prompt as a string), text-stream (the same, "stream":true), ids (prompt as a
--         JSON list of token ids), ids-stream
--   MAX_TOKENS: the answer's length (default 1; the canned engine streams that many chunks)
-- done() prints one line "WRKJSON {...}": requests, duration, req/s and latency percentiles in
-- microseconds, and wrk's error counts (status = HTTP status > 399).

local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
end

-- Common English words: Qwen3's tokenizer gives almost every one (with its leading space) a
-- single token, so N words are about N tokens.
local words = {
  "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
  "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
  "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
  "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "people", "year",
  "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state", "family",
  "student", "group", "country", "problem", "hand", "part", "place", "case", "week", "company",
  "system", "program", "question", "work", "government", "number", "night", "point", "home",
  "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study",
  "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service",
  "friend", "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city",
  "community", "name", "president", "team", "minute", "idea", "kid", "body", "information",
  "back", "parent", "face", "others", "level", "office", "door", "health", "person", "art",
  "war", "history", "party", "result", "change", "morning", "reason", "research", "girl", "guy",
  "moment", "air", "teacher", "force", "education", "good", "new", "first", "last", "long",
  "great", "little", "own", "other", "old", "big", "high", "different", "small", "large",
  "next", "early", "young", "important", "few", "public", "bad", "same", "able", "model",
  "cache", "memory", "request", "server", "token", "network", "answer", "engine", "block",
}
local nwords = #words

-- A small LCG (exact in doubles: the state stays below 2^31).
local function lcg(s) return (s * 1103515245 + 12345) % 2147483648 end

local kind, model, stream, ids, max_tokens
local heads = {}  -- per prefix: everything of the body up to the question
local tail
local request_head
local seq = 0
local state

local prefix_words = 950
local question_words = 45
local prefix_ids = 960
local question_ids = 40

function init(args)
  kind = args[1] or "text"
  model = args[2] or "canned"
  max_tokens = tonumber(args[3] or "1") or 1
  stream = kind:find("stream", 1, true) ~= nil
  ids = kind:sub(1, 3) == "ids"
  local open = '{"model":"' .. model .. '","max_tokens":' .. max_tokens .. ',"temperature":0,"prompt":'
  for k = 1, 16 do
    local s = k * 7919
    local parts = {}
    if ids then
      for i = 1, prefix_ids do
        s = lcg(s)
        parts[i] = tostring(1000 + s % 140000)
      end
      heads[k] = open .. "[" .. table.concat(parts, ",") .. ","
    else
      parts[1] = "System prompt " .. k .. ": you are assistant number " .. k .. "."
      for i = 1, prefix_words do
        s = lcg(s)
        parts[i + 1] = words[1 + (s % nwords)]
      end
      heads[k] = open .. '"' .. table.concat(parts, " ") .. " Question "
    end
  end
  tail = (ids and "]" or '"') .. ',"stream":' .. (stream and "true" or "false") .. "}"
  request_head = "POST /v1/completions HTTP/1.1\r\nHost: " .. wrk.host .. ":" .. tostring(wrk.port) ..
      "\r\nContent-Type: application/json\r\nContent-Length: "
  state = lcg(tid * 1000003)
end

function request()
  seq = seq + 1
  local k = 1 + (seq % 16)
  local q = {}
  if ids then
    -- unique per request: the thread and sequence numbers as ids, then pseudo-random ids
    q[1] = tostring(tid)
    q[2] = tostring(seq % 100000)
    q[3] = tostring(math.floor(seq / 100000))
    for i = 4, question_ids do
      state = lcg(state)
      q[i] = tostring(1000 + state % 140000)
    end
  else
    q[1] = tid .. "." .. seq .. ":"
    for i = 2, question_words do
      state = lcg(state)
      q[i] = words[1 + (state % nwords)]
    end
  end
  local body = heads[k] .. table.concat(q, ids and "," or " ") .. (ids and "" or "?") .. tail
  return request_head .. #body .. "\r\n\r\n" .. body
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"rps":%.1f,"p50_us":%d,"p90_us":%d,' ..
    '"p99_us":%d,"mean_us":%.1f,"max_us":%d,"errors":{"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d}}\n',
    summary.requests, summary.duration, summary.requests * 1e6 / summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean,
    latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end
