import Foundation
import HTTPServer
import ServiceRuntime
import Testing

/// A request as a router sees it, without a server.
func request(_ method: String, _ path: String, body: String = "") -> HTTPRequest {
    HTTPRequest(head: HTTPRequestHead(method: method, path: path, traceID: "trace-1"), body: Array(body.utf8))
}

/// The decoded JSON object of a response body.
func jsonObject(_ response: HTTPResponse) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
}

@Suite("Router")
struct RouterTests {
    @Test("path parameters are extracted and percent-decoded per segment")
    func pathParameters() async throws {
        var router = Router()
        router.post("/api/v1/subscriptions/orders/{orderNo}/cancel") { request in
            .text("\(request.pathParameter("orderNo") ?? "-")")
        }
        let plain = await router.handle(request("POST", "/api/v1/subscriptions/orders/MX42/cancel"))
        #expect(plain.status == 200)
        #expect(String(decoding: plain.body, as: UTF8.self) == "MX42")
        let encoded = await router.handle(request("POST", "/api/v1/subscriptions/orders/a%2Fb%20c/cancel"))
        #expect(String(decoding: encoded.body, as: UTF8.self) == "a/b c")
    }

    @Test("a literal segment wins over a parameter whatever the registration order")
    func literalBeatsParameter() async throws {
        var router = Router()
        router.get("/orders/{id}") { _ in .text("by id") }
        router.get("/orders/search") { _ in .text("search") }
        #expect(String(decoding: await router.handle(request("GET", "/orders/search")).body, as: UTF8.self) == "search")
        #expect(String(decoding: await router.handle(request("GET", "/orders/7")).body, as: UTF8.self) == "by id")
    }

    @Test("unknown path is 404 NOT_FOUND with the trace id")
    func notFound() async throws {
        var router = Router()
        router.get("/a") { _ in .text("a") }
        let response = await router.handle(request("GET", "/b"))
        #expect(response.status == 404)
        let body = try jsonObject(response)
        #expect(body["code"] as? String == "NOT_FOUND")
        #expect(body["traceId"] as? String == "trace-1")
        #expect(await router.handle(request("GET", "/a/extra")).status == 404)
    }

    @Test("known path with another method is 405 with Allow")
    func methodNotAllowed() async throws {
        var router = Router()
        router.get("/items/{id}") { _ in .text("get") }
        router.delete("/items/{id}") { _ in .text("delete") }
        let response = await router.handle(request("POST", "/items/3"))
        #expect(response.status == 405)
        #expect(response.header("allow") == "DELETE, GET")
        #expect(try jsonObject(response)["code"] as? String == "METHOD_NOT_ALLOWED")
    }

    @Test("HEAD is answered by the GET route")
    func headFallsBackToGet() async throws {
        var router = Router()
        router.get("/h") { _ in .text("x") }
        #expect(await router.handle(request("HEAD", "/h")).status == 200)
    }

    @Test("a thrown HTTPError becomes its status and JSON code")
    func httpError() async throws {
        var router = Router()
        router.get("/conflict") { _ in
            throw HTTPError(status: 409, code: "ALREADY_CANCELLED", message: "order already cancelled")
        }
        let response = await router.handle(request("GET", "/conflict"))
        #expect(response.status == 409)
        let body = try jsonObject(response)
        #expect(body["code"] as? String == "ALREADY_CANCELLED")
        #expect(body["message"] as? String == "order already cancelled")
        #expect(body["traceId"] as? String == "trace-1")
    }

    @Test("any other error becomes 500 INTERNAL_ERROR and is logged")
    func otherErrorIsInternal() async throws {
        struct Boom: Error {}
        let sink = LogSink.memory()
        var router = Router(logger: Logger(label: "test", level: .debug, sink: sink))
        router.get("/boom") { _ in throw Boom() }
        let response = await router.handle(request("GET", "/boom"))
        #expect(response.status == 500)
        #expect(try jsonObject(response)["code"] as? String == "INTERNAL_ERROR")
        let line = try #require(sink.lines.first { $0.contains("request handler failed") })
        #expect(line.contains("\"level\":\"error\""))
        #expect(line.contains("Boom"))
        #expect(line.contains("/boom"))
    }
}

@Suite("JSON helpers")
struct JSONHelperTests {
    struct Order: Codable, Equatable {
        var orderNo: String
        var quantity: Int
        var purchasedAt: Date
    }

    @Test("json() encodes declared keys, RFC 3339 dates and the content type")
    func encodes() throws {
        let order = Order(orderNo: "MX1", quantity: 2, purchasedAt: Date(timeIntervalSince1970: 1_700_000_000))
        let response = HTTPResponse.json(order, status: 201)
        #expect(response.status == 201)
        #expect(response.header("Content-Type") == "application/json")
        #expect(
            String(decoding: response.body, as: UTF8.self)
                == #"{"orderNo":"MX1","purchasedAt":"2023-11-14T22:13:20Z","quantity":2}"#)
    }

    @Test("decodeJSON reads what json() wrote")
    func roundTrip() throws {
        let order = Order(orderNo: "MX1", quantity: 2, purchasedAt: Date(timeIntervalSince1970: 1_700_000_000))
        let decoded = try request("POST", "/", body: String(decoding: HTTPResponse.json(order).body, as: UTF8.self))
            .decodeJSON(Order.self)
        #expect(decoded == order)
    }

    @Test("malformed JSON, a missing field or a wrong type is 400 MALFORMED_JSON naming the field")
    func malformed() throws {
        let cases: [(String, String)] = [
            ("{not json", "not valid JSON"),
            (#"{"orderNo":"MX1","purchasedAt":"2023-11-14T22:13:20Z"}"#, "missing field 'quantity'"),
            (#"{"orderNo":"MX1","quantity":"two","purchasedAt":"2023-11-14T22:13:20Z"}"#, "'quantity'"),
            (#"{"orderNo":"MX1","quantity":2,"purchasedAt":"yesterday"}"#, "'purchasedAt'"),
            ("", "not valid JSON"),
        ]
        for (body, fragment) in cases {
            do {
                _ = try request("POST", "/", body: body).decodeJSON(Order.self)
                Issue.record("decoded \(body)")
            } catch {
                #expect(error.status == 400)
                #expect(error.code == "MALFORMED_JSON")
                #expect(error.message.contains(fragment), "\(error.message)")
                #expect(!error.message.contains("two") && !error.message.contains("yesterday"))
            }
        }
    }

    @Test("error() has exactly code, message and traceId")
    func errorShape() throws {
        let response = HTTPResponse.error(status: 422, code: "INVALID", message: "bad", traceID: "t")
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"code":"INVALID","message":"bad","traceId":"t"}"#)
    }

    @Test("a sane X-Request-Id is kept, anything else is replaced by 32 hex digits")
    func traceIDs() {
        #expect(TraceID.accept("abc-DEF_123") == "abc-DEF_123")
        for insane in [nil, "", "has space", "x;y", String(repeating: "a", count: 65), "é"] {
            let id = TraceID.accept(insane)
            #expect(id.count == 32 && id.allSatisfy(\.isHexDigit), "\(String(describing: insane)) -> \(id)")
        }
        #expect(TraceID.generate() != TraceID.generate())
    }
}
