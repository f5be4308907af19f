import Foundation
import ServiceRuntime
import Synchronization
import TestSupport

// An open-loop, constant-rate load generator for the ingress benchmark (issue 17): requests are
// due at fixed times, whatever the earlier answers are doing, and each latency counts from the due
// time, so a server that falls behind shows its queue instead of slowing the load (no coordinated
// omission). It steps the offered rate up and reports the highest rate held with p99 under the
// limit and no answer other than 200.
//
//   bench-load --url http://127.0.0.1:18090 --path /api/v1/iap/apple/notifications/sandbox \
//       --bodies bodies.jsonl [--start 500] [--step 500] [--max 20000] [--probe 5] [--hold 30] \
//       [--p99-ms 50] [--connections 64]
//
// Each body (a line of --bodies) is sent once; the run stops when they run out. Steps of --probe
// seconds find the first rate that fails; the rate below it is then held for --hold seconds, and
// lowered by a tenth until a hold passes.

/// The command line, `--name value` pairs.
struct Options {
    var values: [String: String] = [:]

    init(_ arguments: [String]) throws {
        var rest = arguments[...]
        while let name = rest.popFirst() {
            guard name.hasPrefix("--"), let value = rest.popFirst() else { throw Usage(message: "expected --name value, got \(name)") }
            values[String(name.dropFirst(2))] = value
        }
    }

    func string(_ name: String) throws -> String {
        guard let value = values[name] else { throw Usage(message: "--\(name) is required") }
        return value
    }

    func number(_ name: String, default fallback: Double) throws -> Double {
        guard let text = values[name] else { return fallback }
        guard let value = Double(text), value > 0 else { throw Usage(message: "--\(name) must be a positive number") }
        return value
    }
}

/// A bad command line.
struct Usage: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// What one step measured.
struct Step {
    var offered: Double
    var seconds: Double
    var sent = 0
    var ok = 0
    var failed: [String: Int] = [:]
    var latencies: [Double] = []

    func percentile(_ p: Double) -> Double {
        guard !latencies.isEmpty else { return 0 }
        let sorted = latencies.sorted()
        return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
    }

    func passes(p99Limit: Double) -> Bool { failed.isEmpty && ok == sent && percentile(0.99) < p99Limit }

    var line: String {
        let failures = failed.isEmpty ? "none" : failed.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        return "step offered_per_second=\(Int(offered)) seconds=\(Int(seconds)) sent=\(sent) ok=\(ok)"
            + " p50_ms=\(String(format: "%.1f", percentile(0.5))) p99_ms=\(String(format: "%.1f", percentile(0.99)))"
            + " max_ms=\(String(format: "%.1f", latencies.max() ?? 0)) failures=\(failures)"
    }
}

/// Hands out each body once.
final class Bodies: Sendable {
    private let lines: [[UInt8]]
    private let next = Atomic<Int>(0)

    init(path: String) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        lines = data.split(separator: UInt8(ascii: "\n")).map { Array($0) }
    }

    var remaining: Int { max(0, lines.count - next.load(ordering: .relaxed)) }

    func take() -> [UInt8]? {
        let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
        return index < lines.count ? lines[index] : nil
    }
}

/// A lane's position, shared by the runs of its job (one at a time).
final class Counter: Sendable {
    let value: Atomic<Int>
    init(_ start: Int) { value = Atomic(start) }
}

/// Offers `rate` requests a second for `seconds` and measures them.
func run(rate: Double, seconds: Double, url: String, path: String, connections: Int, bodies: Bodies) async throws -> Step {
    let count = Int(rate * seconds)
    guard bodies.remaining >= count else { throw Usage(message: "out of bodies: sign more (\(bodies.remaining) left, \(count) needed)") }
    let generator = LoadGenerator(baseURL: url, connections: connections)
    let results = Mutex(Step(offered: rate, seconds: seconds))
    let start = ContinuousClock.now + .milliseconds(200)
    // Lanes, each a job that takes every lanes-th request and asks to run again at the next one's
    // due time: the generator's queue holds a few hundred jobs instead of every request of the step.
    let lanes = min(count, connections * 4)
    for lane in 0..<lanes {
        let next = Counter(lane)
        generator.schedule(at: start + .seconds(Double(lane) / rate)) { connection in
            let index = next.value.add(lanes, ordering: .relaxed).oldValue
            let due = start + .seconds(Double(index) / rate)
            guard let body = bodies.take() else { return nil }
            let outcome: String
            do {
                let response = try connection.request("POST", path, headers: ["Content-Type: application/json"], body: body)
                outcome = String(response.status)
            } catch {
                outcome = "error"
            }
            let latency = (ContinuousClock.now - due).inSeconds * 1000
            results.withLock { step in
                step.sent += 1
                step.latencies.append(latency)
                if outcome == "200" { step.ok += 1 } else { step.failed[outcome, default: 0] += 1 }
            }
            let following = index + lanes
            return following < count ? start + .seconds(Double(following) / rate) : nil
        }
    }
    try await generator.run()
    return results.withLock { $0 }
}

let options = try Options(Array(CommandLine.arguments.dropFirst()))
let url = try options.string("url")
let path = try options.string("path")
let bodies = try Bodies(path: try options.string("bodies"))
let limit = try options.number("p99-ms", default: 50)
let connections = Int(try options.number("connections", default: 64))
let probe = try options.number("probe", default: 5)
let hold = try options.number("hold", default: 30)
let step = try options.number("step", default: 500)
let maximum = try options.number("max", default: 20_000)

var rate = try options.number("start", default: 500)
var lastPassing: Double?
while rate <= maximum {
    let measured = try await run(rate: rate, seconds: probe, url: url, path: path, connections: connections, bodies: bodies)
    print("probe " + measured.line)
    guard measured.passes(p99Limit: limit) else { break }
    lastPassing = rate
    rate += step
    try await Task.sleep(for: .seconds(2))
}
var candidate = lastPassing ?? (rate * 0.9).rounded()
var sustained: Step?
while candidate >= 50, sustained == nil, bodies.remaining >= Int(candidate * hold) {
    try await Task.sleep(for: .seconds(3))
    let measured = try await run(rate: candidate, seconds: hold, url: url, path: path, connections: connections, bodies: bodies)
    print("hold " + measured.line)
    if measured.passes(p99Limit: limit) { sustained = measured } else { candidate = (candidate * 0.9).rounded() }
}
if let sustained {
    print(
        "sustained_rate=\(Int(sustained.offered)) hold_seconds=\(Int(hold)) p50_ms=\(String(format: "%.1f", sustained.percentile(0.5)))"
            + " p99_ms=\(String(format: "%.1f", sustained.percentile(0.99))) p99_limit_ms=\(Int(limit))")
} else {
    print("sustained_rate=0 (no rate held for \(Int(hold)) s with p99 < \(Int(limit)) ms and no error)")
}
