import Foundation
import HTTPServer
import ServiceRuntime

// A minimal server for Tests/Benchmarks/http-vs-nginx.sh: GET /bench answers a fixed JSON body.
// Usage: BenchHTTPServer [port] [threads]  (or BENCH_PORT / BENCH_THREADS; defaults 8081 and 4,
// the best of 1, 2 and 4 measured on 2 cores).

let environment = ProcessInfo.processInfo.environment
let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let port = arguments.first ?? environment["BENCH_PORT"].flatMap { Int($0) } ?? 8081
let threads = arguments.dropFirst().first ?? environment["BENCH_THREADS"].flatMap { Int($0) } ?? 4

/// The body nginx also returns, byte for byte.
let body = Array(#"{"status":"ok","service":"bench","items":[1,2,3],"ready":true}"#.utf8)

var router = Router()
router.get("/bench") { _ in HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: body) }

let logger = Logger(label: "bench", level: .notice)
let server = HTTPServer(
    configuration: HTTPServerConfiguration(host: "127.0.0.1", port: port, threadPoolSize: threads),
    router: router, logger: logger)
try await ServiceGroup(services: [server], logger: logger).run()
