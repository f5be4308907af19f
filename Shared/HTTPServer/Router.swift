import Foundation
import ServiceRuntime

/// The code that answers one route, for routes that need nothing from the request context.
public typealias HTTPHandler = @Sendable (HTTPRequest) async throws -> HTTPResponse

/// Maps a method and a path pattern such as `/api/v1/orders/{orderNo}/cancel` to a handler,
/// through the middleware of the router and of the route's group.
///
/// A literal segment beats a parameter at the same position whatever the registration order, so
/// `/orders/search` wins over `/orders/{id}`. Usable without a server (tests call `handle`).
/// Middleware added with `add(middleware:)` wraps the routes added after it; a group's wraps the
/// group's routes, inside the router's.
public struct Router<Context: RequestContext>: Sendable {
    /// Where handler failures other than `HTTPResponseError` are logged; the server fills it in when nil.
    public var logger: Logger?
    private var routes: [Route<Context>] = []
    private var middleware: [any RouterMiddleware<Context>] = []

    /// A router whose handlers get a `Context` (`Router(context: AppRequestContext.self)`).
    public init(context: Context.Type, logger: Logger? = nil) { self.logger = logger }

    /// Wraps every route added after this call.
    public mutating func add(middleware: some RouterMiddleware<Context>) { self.middleware.append(middleware) }

    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping RouteHandler<Context>) {
        let route = Route(method: method.uppercased(), pattern: pattern, handler: middleware.wrapping(handler))
        let index = routes.firstIndex { route.isMoreSpecific(than: $0) } ?? routes.endIndex
        routes.insert(route, at: index)
    }

    /// Routes under `prefix` that share `middleware` (run inside the router's own): `build`
    /// registers them on the group.
    public mutating func group(
        _ prefix: String, middleware: [any RouterMiddleware<Context>] = [],
        _ build: (inout RouterGroup<Context>) throws -> Void
    ) rethrows {
        var group = RouterGroup<Context>(prefix: prefix, middleware: middleware)
        try build(&group)
        for route in group.routes { add(route.method, route.pattern, route.handler) }
    }

    /// Method and pattern of every route, most specific first (for checks that an API document covers them).
    public var registeredRoutes: [(method: String, pattern: String)] { routes.map { ($0.method, $0.pattern) } }

    /// Runs the matching handler; 404 `NOT_FOUND` when no pattern matches the path, 405
    /// `METHOD_NOT_ALLOWED` with `Allow` when patterns match but not for this method.
    public func handle(_ request: HTTPRequest) async -> HTTPResponse { await dispatch(request).response }

    /// `handle`, also telling which route answered (for metrics and the access log).
    func dispatch(_ request: HTTPRequest) async -> (response: HTTPResponse, route: RouteMetrics) {
        let segments = Self.segments(of: request.path)
        var allowed: Set<String> = []
        for method in [request.method, request.method == "HEAD" ? "GET" : nil].compactMap({ $0 }) {
            for route in routes {
                guard let parameters = route.match(segments) else { continue }
                guard route.method == method else {
                    allowed.insert(route.method)
                    continue
                }
                var matched = request
                matched.pathParameters = parameters
                return (await run(route, matched), route.metrics)
            }
        }
        if allowed.isEmpty {
            return (
                HTTPError(status: 404, code: "NOT_FOUND", message: "no such resource").response(traceID: request.traceID),
                RouteMetrics.unmatched
            )
        }
        let error = HTTPError(
            status: 405, code: "METHOD_NOT_ALLOWED", message: "method not allowed for this resource",
            headers: [("Allow", allowed.sorted().joined(separator: ", "))])
        return (error.response(traceID: request.traceID), RouteMetrics.unmatched)
    }

    private func run(_ route: Route<Context>, _ request: HTTPRequest) async -> HTTPResponse {
        let logger = logger ?? Logger(label: "http")
        let context = Context(traceID: request.traceID, logger: logger.with(["trace.id": .string(request.traceID)]))
        do {
            return try await route.handler(request, context)
        } catch let error as any HTTPResponseError {
            return error.response(traceID: request.traceID)
        } catch {
            logger.error(
                "request handler failed",
                ["http.route": .string(route.pattern), "trace.id": .string(request.traceID), "error": .string("\(error)")])
            return HTTPError(status: 500, code: "INTERNAL_ERROR", message: "internal error").response(traceID: request.traceID)
        }
    }

    /// Path segments, each percent-decoded on its own (an undecodable one is kept as sent).
    static func segments(of path: String) -> [String] {
        path.split(separator: "/").map { raw in
            raw.utf8.contains(UInt8(ascii: "%")) ? (raw.removingPercentEncoding ?? String(raw)) : String(raw)
        }
    }
}

extension Router where Context == BasicRequestContext {
    /// A router whose handlers need no context of their own.
    public init(logger: Logger? = nil) { self.init(context: BasicRequestContext.self, logger: logger) }
}

/// Registration by method, shared by routers and groups.
public protocol RouteRegistering<Context> {
    associatedtype Context: RequestContext
    mutating func add(_ method: String, _ pattern: String, _ handler: @escaping RouteHandler<Context>)
}

extension Router: RouteRegistering {}

extension RouteRegistering {
    public mutating func get(_ pattern: String, _ handler: @escaping RouteHandler<Context>) { add("GET", pattern, handler) }
    public mutating func post(_ pattern: String, _ handler: @escaping RouteHandler<Context>) { add("POST", pattern, handler) }
    public mutating func put(_ pattern: String, _ handler: @escaping RouteHandler<Context>) { add("PUT", pattern, handler) }
    public mutating func delete(_ pattern: String, _ handler: @escaping RouteHandler<Context>) {
        add("DELETE", pattern, handler)
    }

    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping HTTPHandler) {
        add(method, pattern) { request, _ in try await handler(request) }
    }
    public mutating func get(_ pattern: String, _ handler: @escaping HTTPHandler) { add("GET", pattern, handler) }
    public mutating func post(_ pattern: String, _ handler: @escaping HTTPHandler) { add("POST", pattern, handler) }
    public mutating func put(_ pattern: String, _ handler: @escaping HTTPHandler) { add("PUT", pattern, handler) }
    public mutating func delete(_ pattern: String, _ handler: @escaping HTTPHandler) { add("DELETE", pattern, handler) }
}

/// Routes under one path prefix sharing middleware; made by `Router.group`, which adds its routes
/// when `build` returns.
public struct RouterGroup<Context: RequestContext>: RouteRegistering {
    let prefix: String
    let middleware: [any RouterMiddleware<Context>]
    var routes: [(method: String, pattern: String, handler: RouteHandler<Context>)] = []

    init(prefix: String, middleware: [any RouterMiddleware<Context>]) {
        self.prefix = prefix.hasSuffix("/") ? String(prefix.dropLast()) : prefix
        self.middleware = middleware
    }

    /// `pattern` is relative to the group's prefix (`""` for the prefix itself).
    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping RouteHandler<Context>) {
        let path = pattern.isEmpty ? prefix : prefix + (pattern.hasPrefix("/") ? pattern : "/" + pattern)
        routes.append((method, path, middleware.wrapping(handler)))
    }

    /// A nested group: its middleware runs inside this one's.
    public mutating func group(
        _ prefix: String, middleware: [any RouterMiddleware<Context>] = [],
        _ build: (inout RouterGroup<Context>) throws -> Void
    ) rethrows {
        var nested = RouterGroup(prefix: "", middleware: middleware)
        try build(&nested)
        let base = prefix.isEmpty ? "" : (prefix.hasPrefix("/") ? prefix : "/" + prefix)
        for route in nested.routes { add(route.method, base + (route.pattern.isEmpty ? "" : route.pattern), route.handler) }
    }
}

/// One registered route.
private struct Route<Context: RequestContext>: Sendable {
    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    let method: String
    let pattern: String
    let segments: [Segment]
    let handler: RouteHandler<Context>
    let metrics: RouteMetrics

    init(method: String, pattern: String, handler: @escaping RouteHandler<Context>) {
        self.method = method
        self.pattern = pattern
        self.handler = handler
        segments = pattern.split(separator: "/").map { part in
            part.hasPrefix("{") && part.hasSuffix("}") && part.count > 2
                ? .parameter(String(part.dropFirst().dropLast())) : .literal(String(part))
        }
        metrics = RouteMetrics(method: method, route: pattern)
    }

    func match(_ path: [String]) -> [String: String]? {
        guard path.count == segments.count else { return nil }
        var parameters: [String: String] = [:]
        for (segment, value) in zip(segments, path) {
            switch segment {
            case .literal(let literal): if literal != value { return nil }
            case .parameter(let name): parameters[name] = value
            }
        }
        return parameters
    }

    /// True when, at the first position where one has a literal and the other a parameter, this
    /// one has the literal.
    func isMoreSpecific(than other: Route) -> Bool {
        for (mine, theirs) in zip(segments, other.segments) {
            switch (mine, theirs) {
            case (.literal, .parameter): return true
            case (.parameter, .literal): return false
            default: continue
            }
        }
        return false
    }
}

/// Request duration histograms of one route, one per status class, registered up front so the
/// label set stays bounded and a request never takes the registry lock.
final class RouteMetrics: Sendable {
    static let unmatched = RouteMetrics(method: "any", route: "unmatched")

    let route: String
    private let byClass: [Histogram]

    init(method: String, route: String) {
        self.route = route
        byClass = (1...5).map { statusClass in
            MetricsRegistry.shared.histogram(
                "http_server_request_duration_seconds",
                help: "Time from the request head to the queued response, by route and status class.",
                labels: ["method": method, "route": route, "status": "\(statusClass)xx"])
        }
    }

    func observe(status: Int, since start: ContinuousClock.Instant) {
        byClass[min(max(status / 100, 1), 5) - 1].observe(since: start)
    }
}
