import Foundation
import HTTPServer
import ServiceRuntime
import Testing

/// A context with what the test middleware establishes.
struct TaggedContext: RequestContext {
    let traceID: String
    var logger: Logger
    var tags: [String] = []

    init(traceID: String, logger: Logger) {
        self.traceID = traceID
        self.logger = logger
    }
}

/// Appends its tag to the context on the way in and to a response header on the way out.
struct Tagging: RouterMiddleware {
    let tag: String

    func handle(
        _ request: HTTPRequest, context: TaggedContext, next: (HTTPRequest, TaggedContext) async throws -> HTTPResponse
    ) async throws -> HTTPResponse {
        var context = context
        context.tags.append(tag)
        var response = try await next(request, context)
        response.headers.append(("X-Tag", tag))
        return response
    }
}

/// Refuses requests without `X-Key` before the handler runs.
struct RequireKey: RouterMiddleware {
    func handle(
        _ request: HTTPRequest, context: TaggedContext, next: (HTTPRequest, TaggedContext) async throws -> HTTPResponse
    ) async throws -> HTTPResponse {
        guard request.header("x-key") != nil else {
            throw HTTPError(status: 401, code: "NO_KEY", message: "a key is required")
        }
        return try await next(request, context)
    }
}

/// An error type of its own that knows its answer.
struct Teapot: HTTPResponseError {
    var status: Int { 418 }
    var code: String { "TEAPOT" }
    var message: String { "short and stout" }
    var headers: [(String, String)] { [("Retry-After", "5")] }
}

@Suite("Middleware, groups and error rendering")
struct MiddlewareTests {
    func taggedRouter() -> Router<TaggedContext> {
        var router = Router(context: TaggedContext.self)
        router.add(middleware: Tagging(tag: "outer"))
        router.get("/open") { _, context in .text(context.tags.joined(separator: ",")) }
        router.group("/api", middleware: [Tagging(tag: "group"), RequireKey()]) { api in
            api.get("items/{id}") { request, context in
                .text("\(request.pathParameter("id") ?? "-") \(context.tags.joined(separator: ","))")
            }
            api.get("") { _, _ in .text("root") }
            api.group("admin", middleware: [Tagging(tag: "admin")]) { admin in
                admin.post("purge") { _, context in .text(context.tags.joined(separator: ",")) }
            }
        }
        return router
    }

    func keyed(_ method: String, _ path: String) -> HTTPRequest {
        HTTPRequest(head: HTTPRequestHead(method: method, path: path, headers: ["x-key": "k"], traceID: "trace-1"))
    }

    @Test("router middleware wraps every route; a group's runs inside it, in order")
    func order() async throws {
        let router = taggedRouter()
        let open = await router.handle(request("GET", "/open"))
        #expect(String(decoding: open.body, as: UTF8.self) == "outer")
        #expect(open.headers.filter { $0.0 == "X-Tag" }.map(\.1) == ["outer"])
        let item = await router.handle(keyed("GET", "/api/items/7"))
        #expect(String(decoding: item.body, as: UTF8.self) == "7 outer,group")
        // On the way out the innermost middleware amends the response first.
        #expect(item.headers.filter { $0.0 == "X-Tag" }.map(\.1) == ["group", "outer"])
        let purge = await router.handle(keyed("POST", "/api/admin/purge"))
        #expect(String(decoding: purge.body, as: UTF8.self) == "outer,group,admin")
        #expect(String(decoding: await router.handle(keyed("GET", "/api")).body, as: UTF8.self) == "root")
    }

    @Test("a group's routes are registered under its prefix")
    func prefixes() {
        let routes = Set(taggedRouter().registeredRoutes.map { "\($0.method) \($0.pattern)" })
        #expect(routes == ["GET /open", "GET /api/items/{id}", "GET /api", "POST /api/admin/purge"])
    }

    @Test("a middleware can refuse before the handler; its error is rendered like a handler's")
    func refusal() async throws {
        let router = taggedRouter()
        let refused = await router.handle(request("GET", "/api/items/7"))
        #expect(refused.status == 401)
        #expect(try jsonObject(refused)["code"] as? String == "NO_KEY")
        #expect(try jsonObject(refused)["traceId"] as? String == "trace-1")
        // The group's middleware does not reach routes outside it.
        #expect(await router.handle(request("GET", "/open")).status == 200)
        // Routing comes first: an unknown path is 404, a wrong method 405, whatever the middleware.
        #expect(await router.handle(request("GET", "/api/nothing")).status == 404)
        #expect(await router.handle(request("DELETE", "/api/items/7")).status == 405)
    }

    @Test("any HTTPResponseError is rendered with its status, code, message and headers")
    func customError() async throws {
        var router = Router()
        router.get("/teapot") { _ in throw Teapot() }
        let response = await router.handle(request("GET", "/teapot"))
        #expect(response.status == 418)
        #expect(
            String(decoding: response.body, as: UTF8.self) == #"{"code":"TEAPOT","message":"short and stout","traceId":"trace-1"}"#)
        #expect(response.header("content-type") == "application/json")
        #expect(response.header("retry-after") == "5")
    }

    @Test("the same rendering outside a router (an admission decision)")
    func renderingOutsideARouter() {
        let error = HTTPError(status: 429, code: "RATE_LIMITED", message: "slow down", headers: [("Retry-After", "1")])
        let response = error.response(traceID: "t")
        #expect(response.status == 429)
        #expect(response.headers.map(\.0) == ["Content-Type", "Cache-Control", "X-Content-Type-Options", "Retry-After"])
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"code":"RATE_LIMITED","message":"slow down","traceId":"t"}"#)
    }

    @Test("the context carries the trace id and a logger stamped with it")
    func contextLogger() async throws {
        let sink = LogSink.memory()
        var router = Router(logger: Logger(label: "test", level: .debug, sink: sink))
        router.get("/log") { _, context in
            context.logger.info("handled")
            return .text(context.traceID)
        }
        let response = await router.handle(request("GET", "/log"))
        #expect(String(decoding: response.body, as: UTF8.self) == "trace-1")
        let line = try #require(sink.lines.first { $0.contains("handled") })
        #expect(line.contains("trace-1"))
    }
}
