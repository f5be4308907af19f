import Foundation
import ServiceRuntime
import TestSupport
import Testing

@testable import HTTPServer

/// One source cannot hold every connection, and a request head cannot trickle in for ever.
@Suite("HTTPServer connection limits")
struct ConnectionLimitTests {
    @Test("a source holding its maximum is refused more; other sources and its open connections are served")
    func perAddressCap() async throws {
        try await withServer(
            testRouter(),
            configure: {
                $0.maxConnectionsPerAddress = 4
                $0.trustedProxies = [AddressRange(cidr: "127.0.0.3")!]
            }
        ) { server in
            let port = server.port
            let (refused, other, held, proxy) = try await blocking {
                // Four idle connections: the source's maximum.
                let holders = try (0..<4).map { _ in try RawConnection(port: port, timeoutSeconds: 5) }
                Thread.sleep(forTimeInterval: 0.3)
                let extra = try RawConnection(port: port, timeoutSeconds: 5)
                try? extra.request("GET", "/hello/extra")
                let refused = (try? extra.readResponse()) == nil
                let other = try RawConnection(port: port, source: "127.0.0.2")
                try other.request("GET", "/hello/other")
                let otherStatus = try other.readResponse().status
                try holders[0].request("GET", "/hello/held")
                let heldStatus = try holders[0].readResponse().status
                // A trusted proxy carries everyone: not capped.
                let proxies = try (0..<6).map { _ in try RawConnection(port: port, source: "127.0.0.3") }
                let proxyStatuses = try proxies.map { connection in
                    try connection.request("GET", "/hello/proxy")
                    return try connection.readResponse().status
                }
                return (refused, otherStatus, heldStatus, proxyStatuses)
            }
            #expect(refused, "a fifth connection from the same address was served")
            #expect(other == 200)
            #expect(held == 200)
            #expect(proxy == Array(repeating: 200, count: 6))
            #expect((metricValue(#"http_server_rejected_connections_total{reason="per_address_limit"}"#) ?? 0) >= 1)
        }
    }

    @Test("the per-source cap is exact when connections arrive at once: 64 held, the 65th refused, a freed slot reused")
    func exactPerAddressCap() async throws {
        let cap = 64
        try await withServer(
            testRouter(),
            configure: {
                $0.maxConnectionsPerAddress = cap
                $0.threadPoolSize = 4  // four threads accepting at once, as the ingress runs
            }
        ) { server in
            let port = server.port
            let (served, reused) = try await blocking {
                // Connected back to back: they wait in the listen backlog together, and MHD's
                // threads accept and admit them concurrently.
                var connections = (0..<(2 * cap)).compactMap { _ in try? RawConnection(port: port, timeoutSeconds: 5) }
                Thread.sleep(forTimeInterval: 0.5)
                var held = connections.filter { connection in
                    guard (try? connection.request("GET", "/hello/held")) != nil else { return false }
                    return (try? connection.readResponse())?.status == 200
                }
                connections.removeAll()
                let served = held.count
                // A slot given back (the connection closed) is a slot a new connection gets.
                held.removeLast()
                Thread.sleep(forTimeInterval: 0.5)
                let fresh = try RawConnection(port: port, timeoutSeconds: 5)
                try? fresh.request("GET", "/hello/fresh")
                let reused = (try? fresh.readResponse())?.status == 200
                return (served, reused)
            }
            #expect(served == cap, "\(served) connections of one source were served, with a cap of \(cap)")
            #expect(reused)
        }
    }

    @Test("an admitted connection counts at once, before MHD reports it opened; an admission never opened lapses")
    func admissionCountsAtOnce() {
        let table = ConnectionTable(
            maxPerAddress: 2, exempt: [], headerTimeout: nil, logger: Logger(label: "test", level: .error, sink: .memory()))
        let source = "192.0.2.1"
        let start = ContinuousClock.now
        // MHD's threads admit concurrently: two admitted, neither reported opened yet.
        #expect(table.admit(source, now: start))
        #expect(table.admit(source, now: start))
        #expect(!table.admit(source, now: start), "a third admitted while two were still being opened")
        #expect(table.admit("192.0.2.2", now: start), "another source has its own count")
        let first = OpaquePointer(bitPattern: 0x1000)!
        table.opened(first, address: source, socket: -1)
        #expect(!table.admit(source, now: start), "opening an admitted connection is not a second count")
        table.closed(first)
        #expect(table.admit(source, now: start))
        // Admissions MHD gave up on before opening (it reports nothing) are returned after a while.
        #expect(!table.admit(source, now: start))
        #expect(table.admit(source, now: start + ConnectionTable.admissionLapse + .seconds(1)))
    }

    @Test("a head trickling in byte by byte is cut at the header timeout, not kept alive by each byte")
    func headerTimeout() async throws {
        try await withServer(
            testRouter(),
            configure: {
                $0.idleTimeout = .seconds(30)
                $0.requestHeaderTimeout = .seconds(1)
            }
        ) { server in
            let port = server.port
            let (closed, served) = try await blocking {
                let slow = try RawConnection(port: port, timeoutSeconds: 1)
                let head = Array("GET /hello/slow HTTP/1.1\r\nHost: test\r\nX-Pad: " + String(repeating: "p", count: 40))
                var closed = false
                for byte in head {
                    // One byte every 200 ms: the idle timeout (30 s) never fires.
                    guard (try? slow.send(String(byte))) != nil else {
                        closed = true
                        break
                    }
                    Thread.sleep(forTimeInterval: 0.2)
                }
                if !closed { closed = (try? slow.waitForClose()) ?? false }
                // A prompt client on a fresh connection is served as before.
                let prompt = try RawConnection(port: port)
                try prompt.request("GET", "/hello/prompt")
                return (closed, try prompt.readResponse().status)
            }
            #expect(closed, "the trickling connection was still open after 8 s")
            #expect(served == 200)
        }
    }
}
