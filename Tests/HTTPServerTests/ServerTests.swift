import Foundation
import HTTPServer
import ServiceRuntime
import TestSupport
import Testing

/// The routes most server tests share.
func testRouter() -> Router<BasicRequestContext> {
    var router = Router()
    router.get("/hello/{name}") { request in
        .json([
            "hello": request.pathParameter("name") ?? "", "q": request.query("q") ?? "",
            "peer": request.head.remoteAddress,
        ])
    }
    router.post("/orders") { request in
        struct Order: Codable {
            var orderNo: String
            var quantity: Int
        }
        var order = try request.decodeJSON(Order.self)
        order.quantity += 1
        return .json(order, status: 201)
    }
    router.get("/teapot") { _ in throw HTTPError(status: 418, code: "TEAPOT", message: "short and stout") }
    router.get("/crash") { _ in throw CocoaError(.featureUnsupported) }
    return router
}

/// The value of one series in the shared registry's exposition.
func metricValue(_ series: String) -> Double? {
    MetricsRegistry.shared.prometheusText().split(separator: "\n")
        .first { $0.hasPrefix(series + " ") }
        .flatMap { Double($0.dropFirst(series.count + 1)) }
}

@Suite("HTTPServer over sockets")
struct ServerTests {
    @Test("GET with path parameter and query; the request id is echoed or generated")
    func basicRequest() async throws {
        try await withServer(testRouter()) { server in
            let port = server.port
            #expect(port > 0)
            let (first, second) = try await blocking {
                let connection = try RawConnection(port: port)
                try connection.request("GET", "/hello/world?q=a+b%21", headers: ["X-Request-Id": "req-123"])
                let first = try connection.readResponse()
                try connection.request("GET", "/hello/again", headers: ["X-Request-Id": "bad id!"])
                return (first, try connection.readResponse())
            }
            #expect(first.status == 200)
            #expect(first.headers["x-request-id"] == "req-123")
            #expect(first.headers["content-type"] == "application/json")
            #expect(first.text == #"{"hello":"world","peer":"127.0.0.1","q":"a b!"}"#)
            #expect(second.status == 200)
            let generated = try #require(second.headers["x-request-id"])
            #expect(generated.count == 32 && generated.allSatisfy(\.isHexDigit))
        }
    }

    @Test("JSON body in, JSON body out; malformed JSON is 400 MALFORMED_JSON")
    func jsonOverTheWire() async throws {
        try await withServer(testRouter()) { server in
            let port = server.port
            let (good, bad) = try await blocking {
                let connection = try RawConnection(port: port)
                try connection.request(
                    "POST", "/orders", headers: ["Content-Type": "application/json"],
                    body: #"{"orderNo":"MX9","quantity":1}"#)
                let good = try connection.readResponse()
                try connection.request(
                    "POST", "/orders", headers: ["Content-Type": "application/json"],
                    body: #"{"orderNo":"MX9","#)
                return (good, try connection.readResponse())
            }
            #expect(good.status == 201)
            #expect(good.text == #"{"orderNo":"MX9","quantity":2}"#)
            #expect(bad.status == 400)
            #expect(bad.errorCode == "MALFORMED_JSON")
        }
    }

    @Test("a handler's HTTPError keeps its status and code; another error is 500 INTERNAL_ERROR")
    func handlerErrors() async throws {
        try await withServer(testRouter()) { server in
            let port = server.port
            let (teapot, crash, missing) = try await blocking {
                let connection = try RawConnection(port: port)
                try connection.request("GET", "/teapot")
                let teapot = try connection.readResponse()
                try connection.request("GET", "/crash")
                let crash = try connection.readResponse()
                try connection.request("DELETE", "/teapot")
                return (teapot, crash, try connection.readResponse())
            }
            #expect(teapot.status == 418)
            #expect(teapot.errorCode == "TEAPOT")
            #expect(crash.status == 500)
            #expect(crash.errorCode == "INTERNAL_ERROR")
            #expect(missing.status == 405)
            #expect(missing.headers["allow"] == "GET")
        }
    }

    @Test("a port already in use fails start() with the reason logged; an invalid host fails too")
    func startFailures() async throws {
        try await withServer(testRouter()) { server in
            let sink = LogSink.memory()
            let taken = HTTPServer(
                configuration: HTTPServerConfiguration(host: "127.0.0.1", port: server.port), router: Router(),
                logger: Logger(label: "test", level: .info, sink: sink))
            #expect(throws: HTTPServerError.self) { try taken.start() }
            #expect(sink.lines.contains { $0.contains(#""level":"error""#) && $0.contains("bind") }, "\(sink.lines)")
            await taken.shutdown()
        }
        let invalid = HTTPServer(
            configuration: HTTPServerConfiguration(host: "not-an-address", port: 0), router: Router(),
            logger: Logger(label: "test", level: .critical, sink: .memory()))
        #expect(throws: HTTPServerError.self) { try invalid.start() }
    }

    @Test("the debug access log names route and status, never the body or Authorization; metrics count")
    func accessLogAndMetrics() async throws {
        let sink = LogSink.memory()
        try await withServer(testRouter(), logger: Logger(label: "test", level: .debug, sink: sink)) { server in
            let port = server.port
            let response = try await blocking {
                let connection = try RawConnection(port: port)
                try connection.request(
                    "POST", "/orders",
                    headers: ["Authorization": "Bearer s3cr3t-token-value", "Content-Type": "application/json"],
                    body: #"{"orderNo":"BODY-MARKER","quantity":1}"#)
                return try connection.readResponse()
            }
            #expect(response.status == 201)
        }
        let line = try #require(sink.lines.first { $0.contains(#""message":"http request""#) })
        #expect(line.contains(#""http.route":"/orders""#))
        #expect(line.contains(#""http.status":201"#))
        #expect(!sink.lines.joined().contains("BODY-MARKER"))
        #expect(!sink.lines.joined().contains("s3cr3t"))
        let count = metricValue(#"http_server_request_duration_seconds_count{method="POST",route="/orders",status="2xx"}"#)
        #expect((count ?? 0) >= 1)
    }

    @Test("a body announced over the limit is answered 413 before it is read")
    func oversizedBodyRejectedUnread() async throws {
        let calls = Locked(0)
        var router = Router()
        router.post("/upload") { _ in
            calls.withLock { $0 += 1 }
            return .text("read")
        }
        try await withServer(router, configure: { $0.maxBodyBytes = 1024 }) { server in
            let port = server.port
            let (response, closed) = try await blocking {
                let connection = try RawConnection(port: port)
                try connection.send(
                    "POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 100000000\r\n\r\n" + "only a few bytes")
                let response = try connection.readResponse()
                return (response, try connection.waitForClose())
            }
            #expect(response.status == 413)
            #expect(response.errorCode == "PAYLOAD_TOO_LARGE")
            #expect(closed, "the server should close instead of waiting for the rest of the body")
        }
        #expect(calls.value == 0)
        #expect((metricValue(#"http_server_rejected_requests_total{reason="payload_too_large"}"#) ?? 0) >= 1)
    }

    @Test("a chunked body crossing the limit is answered 413 JSON without running the handler")
    func oversizedChunkedBody() async throws {
        let calls = Locked(0)
        var router = Router()
        router.post("/upload") { _ in
            calls.withLock { $0 += 1 }
            return .text("read")
        }
        try await withServer(router, configure: { $0.maxBodyBytes = 1024 }) { server in
            let port = server.port
            let outcome = try await blocking { () -> String in
                let connection = try RawConnection(port: port)
                try connection.send("POST /upload HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n")
                let chunk = "400\r\n" + String(repeating: "x", count: 1024) + "\r\n"
                do {
                    for _ in 0..<64 { try connection.send(chunk) }
                    try connection.send("0\r\n\r\n")
                    let response = try connection.readResponse()
                    return "\(response.status) \(response.errorCode ?? "")"
                } catch {
                    return try connection.waitForClose() ? "closed" : "open"
                }
            }
            #expect(outcome == "413 PAYLOAD_TOO_LARGE", "\(outcome)")
        }
        #expect(calls.value == 0)
    }

    @Test("the admission hook rejects on the head alone (415), before the body is sent")
    func admissionRejectsBeforeBody() async throws {
        let admission: @Sendable (HTTPRequestHead) -> HTTPResponse? = { head in
            guard head.method == "POST", head.headers["content-type"] != "application/json" else { return nil }
            return .error(status: 415, code: "UNSUPPORTED_MEDIA_TYPE", message: "send JSON", traceID: head.traceID)
        }
        try await withServer(testRouter(), admission: admission) { server in
            let port = server.port
            let (rejected, accepted) = try await blocking {
                let first = try RawConnection(port: port)
                try first.send("POST /orders HTTP/1.1\r\nHost: test\r\nContent-Type: text/plain\r\nContent-Length: 500\r\n\r\n")
                let rejected = try first.readResponse()
                let second = try RawConnection(port: port)
                try second.request(
                    "POST", "/orders", headers: ["Content-Type": "application/json"],
                    body: #"{"orderNo":"A","quantity":0}"#)
                return (rejected, try second.readResponse())
            }
            #expect(rejected.status == 415)
            #expect(rejected.errorCode == "UNSUPPORTED_MEDIA_TYPE")
            #expect(rejected.headers["x-request-id"] != nil)
            #expect(accepted.status == 201)
        }
    }

    @Test("a malformed request line is one 400 and the connection closed; bytes that are not HTTP are only closed")
    func malformedRequestLine() async throws {
        try await withServer(testRouter()) { server in
            let port = server.port
            // libmicrohttpd 1.0 answers a broken request line, but drops a connection whose first
            // bytes are control characters without a word: it is not talking HTTP.
            let cases: [(String, Int?)] = [
                ("GET /hello/x HTTP/1.1 trailing-garbage", 400), ("\u{1}\u{2} garbage", nil), ("GET /hello/x", 400),
            ]
            for (line, expected) in cases {
                let responses = try await blocking {
                    let connection = try RawConnection(port: port)
                    try connection.send(line + "\r\nHost: test\r\n\r\n")
                    return try connection.responsesUntilClose()
                }
                let statuses = try #require(responses, "\(line.debugDescription): the connection stayed open").map(\.status)
                #expect(statuses == (expected.map { [$0] } ?? []), "\(line.debugDescription)")
            }
        }
    }

    @Test("a request head within maxHeaderBytes is served, one well over it is refused by MHD")
    func headLimit() async throws {
        try await withServer(testRouter()) { server in
            let port = server.port
            let (within, over) = try await blocking {
                let head = { (size: Int) in
                    "GET /hello/x HTTP/1.1\r\nHost: test\r\nX-Big: " + String(repeating: "b", count: size) + "\r\n\r\n"
                }
                let first = try RawConnection(port: port)
                try first.send(head(15 * 1024))
                let within = try first.readResponse()
                let second = try RawConnection(port: port)
                try second.send(head(32 * 1024))
                return (within, try second.readResponse())
            }
            #expect(within.status == 200)
            #expect([413, 414, 431].contains(over.status), "\(over.status)")
        }
    }

    @Test("an idle connection is closed after the idle timeout")
    func idleConnectionClosed() async throws {
        try await withServer(testRouter(), configure: { $0.idleTimeout = .seconds(1) }) { server in
            let port = server.port
            let closed = try await blocking {
                try RawConnection(port: port, timeoutSeconds: 15).waitForClose()
            }
            #expect(closed)
        }
    }

    @Test("1,000 requests on 50 concurrent keep-alive connections are all answered")
    func concurrentKeepAlive() async throws {
        var router = Router()
        router.get("/n/{n}") { request in
            await Task.yield()
            return .text(request.pathParameter("n") ?? "")
        }
        try await withServer(router) { server in
            let port = server.port
            let answered = try await withThrowingTaskGroup(of: Int.self) { group in
                for connectionIndex in 0..<50 {
                    group.addTask {
                        try await blocking {
                            // 50 connections at once beside the other suites on two cores: each
                            // answer may wait well over the default 10 s receive timeout.
                            let connection = try RawConnection(port: port, timeoutSeconds: 60)
                            var good = 0
                            for requestIndex in 0..<20 {
                                let n = "\(connectionIndex)-\(requestIndex)"
                                try connection.request("GET", "/n/\(n)")
                                let response = try connection.readResponse()
                                if response.status == 200, response.text == n { good += 1 }
                            }
                            return good
                        }
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(answered == 1000)
        }
    }
}

@Suite("HTTPServer shutdown")
struct ShutdownTests {
    @Test("shutdown refuses new connections at once and waits for the in-flight handler")
    func gracefulShutdown() async throws {
        let entered = ShutdownTrigger()
        let release = ShutdownTrigger()
        var router = Router()
        router.get("/slow") { _ in
            entered.fire()
            await release.wait()
            return .text("finished")
        }
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2)
        configuration.shutdownGracePeriod = .seconds(60)
        let server = HTTPServer(
            configuration: configuration, router: router,
            logger: Logger(label: "test", level: .error, sink: .memory()))
        try await blocking { try server.start() }
        let port = server.port

        let slow = Task {
            try await blocking {
                let connection = try RawConnection(port: port, timeoutSeconds: 60)
                try connection.request("GET", "/slow")
                return try connection.readResponse()
            }
        }
        #expect(await entered.wait(timeout: .seconds(10)))

        let shutdownReturned = Locked(false)
        let shutdown = Task {
            await server.shutdown()
            shutdownReturned.withLock { $0 = true }
        }
        let refused = try await blocking { () -> Bool in
            for _ in 0..<500 {
                do {
                    _ = try RawConnection(port: port)
                    usleep(20_000)
                } catch let error as SocketError where error.code == ECONNREFUSED || error.code == ECONNRESET {
                    // Reset: the kernel had queued it just before the listening socket closed.
                    return true
                }
            }
            return false
        }
        #expect(refused)
        #expect(!shutdownReturned.value, "shutdown must wait for the running handler")

        release.fire()
        let response = try await slow.value
        #expect(response.status == 200)
        #expect(response.text == "finished")
        #expect(response.headers["connection"]?.lowercased() == "close")
        await shutdown.value
        #expect(shutdownReturned.value)
        #expect(throws: SocketError.self) { try RawConnection(port: port) }
    }

    @Test("a handler still running after the grace period is answered 503 and shutdown completes")
    func graceExpires() async throws {
        let entered = ShutdownTrigger()
        let release = ShutdownTrigger()
        var router = Router()
        router.get("/stuck") { _ in
            entered.fire()
            await release.wait()
            return .text("too late")
        }
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2)
        configuration.shutdownGracePeriod = .milliseconds(200)
        let server = HTTPServer(
            configuration: configuration, router: router,
            logger: Logger(label: "test", level: .critical, sink: .memory()))
        // Bound before run(), so the port is known however slowly the task starts on a busy machine.
        try server.start()
        let port = server.port
        let run = Task { try await server.run() }
        let stuck = Task {
            try await blocking {
                let connection = try RawConnection(port: port, timeoutSeconds: 30)
                try connection.request("GET", "/stuck")
                return try connection.readResponse()
            }
        }
        #expect(await entered.wait(timeout: .seconds(10)))
        await server.shutdown()
        let response = try await stuck.value
        #expect(response.status == 503)
        #expect(response.errorCode == "SHUTTING_DOWN")
        try await run.value
        release.fire()
    }
}
