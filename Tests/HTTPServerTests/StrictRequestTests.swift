import Foundation
import HTTPServer
import ServiceRuntime
import Testing

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
