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
}
