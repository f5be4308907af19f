import Foundation
import ServiceRuntime
import TestSupport
import Testing

@testable import HTTPServer

/// What the server refuses before any handler runs: ambiguous requests get one clear answer
/// instead of a guess.
@Suite("HTTPServer strictness")
struct StrictRequestTests {
    @Test("a query argument given twice is 400 INVALID_REQUEST, not its first value")
    func repeatedQueryArgument() async throws {
        try await withServer(testRouter()) { server in
            let port = server.port
            let (single, repeated, encoded) = try await blocking {
                func get(_ target: String) throws -> RawResponse {
                    let connection = try RawConnection(port: port)
                    try connection.request("GET", target)
                    return try connection.readResponse()
                }
                return (try get("/hello/x?q=1"), try get("/hello/x?q=1&q=100"), try get("/hello/x?q=1&%71=100"))
            }
            #expect(single.status == 200)
            #expect(repeated.status == 400)
            #expect(repeated.errorCode == "INVALID_REQUEST")
            #expect(encoded.status == 400, "a name spelled with an escape is the same name")
        }
    }

    @Test("ambiguous framing is one 400 in JSON MALFORMED_REQUEST, the connection closed and no handler run")
    func ambiguousFraming() async throws {
        let calls = Locked(0)
        var router = testRouter()
        router.post("/upload") { _ in
            calls.withLock { $0 += 1 }
            return .text("read")
        }
        try await withServer(router) { server in
            let port = server.port
            // Refused by our framing check, in JSON.
            let ours = [
                "two lengths": "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 20\r\n\r\nhello"
                    + "GET /hello/x HTTP/1.1\r\nHost: t\r\n\r\n",
                "same length twice": "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
                "two hosts": "GET /hello/x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            ]
            // Refused by libmicrohttpd 1.0 before any callback, in our JSON shape (the patch
            // deploy/local/libmicrohttpd-patches/json-error-bodies.patch).
            let parsers = [
                "length and chunked": "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                "other coding": "POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
                "no host": "GET /hello/x HTTP/1.1\r\n\r\n",
            ]
            for (name, raw) in ours.merging(parsers, uniquingKeysWith: { a, _ in a }) {
                let responses = try await blocking {
                    let connection = try RawConnection(port: port)
                    try connection.send(raw)
                    return try connection.responsesUntilClose()
                }
                let response = try #require(responses?.first, "\(name): no answer, or the connection stayed open")
                #expect(responses?.count == 1, "\(name): \(responses?.count ?? 0) answers")
                #expect(response.status == 400, "\(name)")
                #expect(response.errorCode == "MALFORMED_REQUEST", "\(name)")
                #expect(response.headers["content-type"] == "application/json", "\(name)")
            }
        }
        #expect(calls.value == 0)
    }

    @Test(
        "what the parser refuses (NUL, bare LF, a folded line, a negative length, whitespace before a chunk extension) is one 400, closed, no handler run"
    )
    // libmicrohttpd 1.0 answers these itself before any callback (400, the connection closed; the
    // body in our JSON shape by our patch): what this pins is one answer in the one error format,
    // the close, and that no handler runs.
    // (1.0.1 refuses any chunk extension, even a well-formed `5;x`: it leaves the line's LF in
    // the chunk; clients practically never send extensions.)
    func refusedByTheParser() async throws {
        let calls = Locked(0)
        var router = testRouter()
        router.post("/upload") { _ in
            calls.withLock { $0 += 1 }
            return .text("read")
        }
        try await withServer(router) { server in
            let port = server.port
            let refused = [
                "NUL in a value": "GET /hello/x HTTP/1.1\r\nHost: t\r\nX-Nul: a\u{0}b\r\n\r\n",
                "bare LF": "GET /hello/x HTTP/1.1\r\nHost: t\nX-A: b\r\n\r\n",
                "folded line": "GET /hello/x HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n b\r\n\r\n",
                "negative length": "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n",
                "whitespace before a chunk extension":
                    "POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5 ;x\r\nhello\r\n0\r\n\r\n",
            ]
            for (name, raw) in refused {
                let responses = try await blocking {
                    let connection = try RawConnection(port: port)
                    try connection.send(raw)
                    return try connection.responsesUntilClose()
                }
                let response = try #require(responses?.first, "\(name): no answer, or the connection stayed open")
                #expect(responses?.count == 1, "\(name): \(responses?.count ?? 0) answers")
                #expect(response.status == 400, "\(name)")
                #expect(response.headers["connection"]?.lowercased() == "close", "\(name)")
                #expect(response.errorCode == "MALFORMED_REQUEST", "\(name)")
            }
            // The same requests well formed are served: the parser refuses the form, not the content.
            let served = [
                "GET /hello/x HTTP/1.1\r\nHost: t\r\nX-Nul: ab\r\nX-Folded: a b\r\n\r\n",
                "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx",
                "POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            ]
            for raw in served {
                let response = try await blocking {
                    let connection = try RawConnection(port: port)
                    try connection.send(raw)
                    return try connection.readResponse()
                }
                #expect(response.status == 200, "\(raw.debugDescription)")
            }
        }
        #expect(calls.value == 2, "only the two well-formed uploads reach the handler")
    }

    @Test("a head over maxHeaderBytes is one 431 HEADERS_TOO_LARGE in JSON and a close; one beyond MHD's pool one 431 too")
    func oversizedHead() async throws {
        try await withServer(testRouter(), configure: { $0.maxHeaderBytes = 8 * 1024 }) { server in
            let port = server.port
            func send(_ size: Int) async throws -> [RawResponse]? {
                try await blocking {
                    let connection = try RawConnection(port: port)
                    try connection.send("GET /hello/x HTTP/1.1\r\nHost: t\r\nX-Big: \(String(repeating: "b", count: size))\r\n\r\n")
                    return try connection.responsesUntilClose()
                }
            }
            let over = try #require(try await send(12 * 1024), "the connection stayed open")
            #expect(over.map(\.status) == [431])
            #expect(over.first?.errorCode == "HEADERS_TOO_LARGE")
            // Beyond the connection's memory pool (twice the limit) MHD answers before any
            // callback (in our JSON shape by our patch): still one 431 and the connection closed.
            let far = try #require(try await send(64 * 1024), "the connection stayed open")
            #expect(far.map(\.status) == [431])
            #expect(far.first?.errorCode == "HEADERS_TOO_LARGE")
            #expect(far.first?.headers["content-type"] == "application/json")
        }
    }

    @Test("the server starts only on a libmicrohttpd with client discipline levels: 1.0 or later")
    func libraryVersion() {
        #expect(ServerCore.parsesStrictly(libraryVersion: "1.0.1"))
        #expect(ServerCore.parsesStrictly(libraryVersion: "1.1.0"))
        #expect(!ServerCore.parsesStrictly(libraryVersion: "0.9.75"), "bookworm's")
        #expect(!ServerCore.parsesStrictly(libraryVersion: ""))
    }

    @Test("paths are normalised once, before admission and routing")
    func normalisedPaths() async throws {
        let admission: @Sendable (HTTPRequestHead) -> HTTPResponse? = { head in
            head.path == "/orders" ? HTTPError(status: 415, code: "REFUSED", message: "x").response(traceID: head.traceID) : nil
        }
        try await withServer(testRouter(), admission: admission) { server in
            let port = server.port
            let statuses = try await blocking {
                try ["//hello/x", "/hello/x/", "/%68ello/x", "/a/../hello/./x", "/metrics", "//orders/", "/%6Frders"].map { path in
                    let connection = try RawConnection(port: port)
                    try connection.request(path.contains("orders") ? "POST" : "GET", path)
                    return try connection.readResponse().status
                }
            }
            #expect(statuses == [200, 200, 200, 200, 404, 415, 415])
        }
    }

    @Test("normalisation: empty and dot segments, unreserved escapes decoded, others kept upper-case")
    func normalisation() {
        #expect(RequestPath.normalized("/") == "/")
        #expect(RequestPath.normalized("") == "/")
        #expect(RequestPath.normalized("//a///b/") == "/a/b")
        #expect(RequestPath.normalized("/a/./b/../c") == "/a/c")
        #expect(RequestPath.normalized("/../../a") == "/a")
        #expect(RequestPath.normalized("/%6D%65trics") == "/metrics")
        #expect(RequestPath.normalized("/%2e%2E/x") == "/x")
        #expect(RequestPath.normalized("/a%2fb/%c3%a9") == "/a%2Fb/%C3%A9")
        #expect(RequestPath.normalized("/100%/%zz") == "/100%/%zz")
    }
}

@Suite("Client address behind trusted proxies")
struct ClientAddressTests {
    let proxies = ["10.0.0.0/8", "2001:db8::/32"].compactMap(AddressRange.init(cidr:))

    @Test("CIDRs parse and match IPv4, IPv6 and IPv4-mapped addresses; nonsense is refused")
    func ranges() {
        #expect(proxies.count == 2)
        #expect(proxies[0].contains("10.255.0.1"))
        #expect(!proxies[0].contains("11.0.0.1"))
        #expect(proxies[0].contains("::ffff:10.1.2.3"))
        #expect(proxies[1].contains("2001:db8:1::5"))
        #expect(!proxies[1].contains("2001:db9::1"))
        #expect(AddressRange(cidr: "192.0.2.7")?.contains("192.0.2.7") == true)
        #expect(AddressRange(cidr: "192.0.2.7")?.contains("192.0.2.8") == false)
        for bad in ["10.0.0.0/33", "10.0.0.0/", "example.com", "10.0.0.0/8/1", "::/129", ""] {
            #expect(AddressRange(cidr: bad) == nil, "\(bad)")
        }
    }

    @Test("the rightmost untrusted X-Forwarded-For entry, only behind a trusted peer")
    func resolution() {
        func client(_ peer: String, _ header: String?) -> String {
            ClientAddress.resolve(peer: peer, forwardedFor: header, trustedProxies: proxies)
        }
        #expect(client("10.0.0.1", "203.0.113.7") == "203.0.113.7")
        #expect(client("10.0.0.1", "198.51.100.1, 203.0.113.7, 10.0.0.2") == "203.0.113.7")
        #expect(client("10.0.0.1", "junk, 10.0.0.2") == "10.0.0.2")
        #expect(client("10.0.0.1", nil) == "10.0.0.1")
        #expect(client("192.0.2.1", "203.0.113.7") == "192.0.2.1")
        #expect(ClientAddress.resolve(peer: "10.0.0.1", forwardedFor: "203.0.113.7", trustedProxies: []) == "10.0.0.1")
    }
}
