-- wrk script: POSTs pre-made JSON bodies (one per line of the file $BODIES) to $TARGET_PATH.
-- Thread i of $WRK_THREADS takes lines i, i+n, i+2n…, so every body is sent once until a thread
-- runs out (it then starts over: those requests are counted as reused). Answers are counted by
-- outcome: 200 "accepted" (a new row), 200 "duplicate", anything else.
local threads = {}
local created = 0

function setup(thread)
    thread:set("id", created)
    table.insert(threads, thread)
    created = created + 1
end

-- Requests are formatted once, here: building a 12 KB request per call cost wrk more CPU than
-- the ingress spends on some of its steps, on the same two cores.
function init(args)
    local step = tonumber(os.getenv("WRK_THREADS"))
    local path = os.getenv("TARGET_PATH")
    local headers = { ["Content-Type"] = "application/json" }
    requests = {}
    local line_number = 0
    for line in io.lines(os.getenv("BODIES")) do
        if line_number % step == id then requests[#requests + 1] = wrk.format("POST", path, headers, line) end
        line_number = line_number + 1
    end
    body_count = #requests
    sent, accepted, duplicate, other = 0, 0, 0, 0
end

function request()
    sent = sent + 1
    return requests[(sent - 1) % body_count + 1]
end

function response(status, headers, body)
    if status ~= 200 then
        other = other + 1
    elseif string.find(body, '"duplicate"', 1, true) then
        duplicate = duplicate + 1
    else
        accepted = accepted + 1
    end
end

function done(summary, latency, requests)
    local totals = { accepted = 0, duplicate = 0, other = 0, reused = 0 }
    for _, thread in ipairs(threads) do
        totals.accepted = totals.accepted + thread:get("accepted")
        totals.duplicate = totals.duplicate + thread:get("duplicate")
        totals.other = totals.other + thread:get("other")
        totals.reused = totals.reused + math.max(0, thread:get("sent") - thread:get("body_count"))
    end
    io.write(string.format("lua accepted=%d duplicate=%d other=%d reused=%d seconds=%.3f\n",
        totals.accepted, totals.duplicate, totals.other, totals.reused, summary.duration / 1e6))
end
