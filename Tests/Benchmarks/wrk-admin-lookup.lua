-- GET /admin/v1/lookup?q=ID with a random id from the file $IDS (one per line: user ids, order
-- numbers, transaction ids, original transaction ids and notification UUIDs sampled from the
-- database by lookup-latency.sh).
local token = os.getenv("ADMIN_TOKEN")
math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))

function init(args)
    ids = {}
    for line in io.lines(os.getenv("IDS")) do ids[#ids + 1] = line end
end

request = function()
    local q = ids[math.random(1, #ids)]
    return wrk.format("GET", "/admin/v1/lookup?q=" .. q, { ["Authorization"] = "Bearer " .. token })
end

response = function(status, headers, body)
    if status ~= 200 then
        io.stderr:write("lookup answered " .. status .. ": " .. body:sub(1, 200) .. "\n")
    end
end
