-- wrk script: POSTs metered usage calls to /api/v1/credits/usage with a service token, each with
-- a fresh idempotency key ($KEY_PREFIX-thread-counter) for a random one of $USERS seeded users.
-- Answers are counted: 200 (charged), 402 (CREDITS_EXHAUSTED), anything else.
local threads = {}

function setup(thread)
    thread:set("id", #threads)
    table.insert(threads, thread)
end

function init(args)
    math.randomseed(os.time() + id * 7919)
    prefix = os.getenv("KEY_PREFIX") .. "-" .. id .. "-"
    users = tonumber(os.getenv("USERS"))
    headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. os.getenv("SERVICE_TOKEN") }
    counter, charged, exhausted, other = 0, 0, 0, 0
end

function request()
    counter = counter + 1
    local body = string.format('{"idempotencyKey":"%s%d","userId":"bench-user-%d","units":%d,"rate":"chat.message"}',
        prefix, counter, math.random(users), math.random(1, 4))
    return wrk.format("POST", "/api/v1/credits/usage", headers, body)
end

function response(status, headers, body)
    if status == 200 then
        charged = charged + 1
    elseif status == 402 then
        exhausted = exhausted + 1
    else
        other = other + 1
    end
end

function done(summary, latency, requests)
    local totals = { charged = 0, exhausted = 0, other = 0 }
    for _, thread in ipairs(threads) do
        totals.charged = totals.charged + thread:get("charged")
        totals.exhausted = totals.exhausted + thread:get("exhausted")
        totals.other = totals.other + thread:get("other")
    end
    io.write(string.format("lua charged=%d exhausted=%d other=%d seconds=%.3f\n",
        totals.charged, totals.exhausted, totals.other, summary.duration / 1e6))
end
