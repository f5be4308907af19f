-- GET /admin/v1/lookup?q=ID with an id of a random kind for a random seeded user or chain
-- (lookup-latency.sh seeds them): user, order, transaction, original transaction, notification.
local token = os.getenv("ADMIN_TOKEN")
local users = tonumber(os.getenv("USERS"))
local events = tonumber(os.getenv("EVENTS"))
math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))

request = function()
    local n = math.random(1, users)
    local kind = math.random(1, 5)
    local q
    if kind == 1 then q = "bench-user-" .. n
    elseif kind == 2 then q = "bench-order-" .. n
    elseif kind == 3 then q = tostring(3000000000 + n)
    elseif kind == 4 then q = tostring(1000000000 + n)
    else q = "bench-notification-" .. math.random(1, events) end
    return wrk.format("GET", "/admin/v1/lookup?q=" .. q, { ["Authorization"] = "Bearer " .. token })
end

response = function(status, headers, body)
    if status ~= 200 then
        io.stderr:write("lookup answered " .. status .. ": " .. body:sub(1, 200) .. "\n")
    end
end
