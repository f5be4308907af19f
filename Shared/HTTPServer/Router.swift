import Foundation
import ServiceRuntime

/// The code that answers one route.
public typealias HTTPHandler = @Sendable (HTTPRequest) async throws -> HTTPResponse

/// Maps a method and a path pattern such as `/api/v1/orders/{orderNo}/cancel` to a handler.
///
/// A literal segment beats a parameter at the same position whatever the registration order, so
/// `/orders/search` wins over `/orders/{id}`. Usable without a server (tests call `handle`).
public struct Router: Sendable {
    /// Where handler failures other than `HTTPError` are logged; the server fills it in when nil.
    public var logger: Logger?
    private var routes: [Route] = []

    public init(logger: Logger? = nil) { self.logger = logger }

    public mutating func add(_ method: String, _ pattern: String, _ handler: @escaping HTTPHandler) {
        let route = Route(method: method.uppercased(), pattern: pattern, handler: handler)
        let index = routes.firstIndex { route.isMoreSpecific(than: $0) } ?? routes.endIndex
        routes.insert(route, at: index)
    }

    /// Method and pattern of every route, most specific first (for checks that an API document covers them).
    public var registeredRoutes: [(method: String, pattern: String)] { routes.map { ($0.method, $0.pattern) } }

    public mutating func get(_ pattern: String, _ handler: @escaping HTTPHandler) { add("GET", pattern, handler) }
    public mutating func post(_ pattern: String, _ handler: @escaping HTTPHandler) { add("POST", pattern, handler) }
    public mutating func put(_ pattern: String, _ handler: @escaping HTTPHandler) { add("PUT", pattern, handler) }
    public mutating func delete(_ pattern: String, _ handler: @escaping HTTPHandler) {
        add("DELETE", pattern, handler)
    }

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
                .error(status: 404, code: "NOT_FOUND", message: "no such resource", traceID: request.traceID),
                RouteMetrics.unmatched
            )
        }
        var response = HTTPResponse.error(
            status: 405, code: "METHOD_NOT_ALLOWED", message: "method not allowed for this resource",
            traceID: request.traceID)
        response.headers.append(("Allow", allowed.sorted().joined(separator: ", ")))
        return (response, RouteMetrics.unmatched)
    }

    private func run(_ route: Route, _ request: HTTPRequest) async -> HTTPResponse {
        do {
            return try await route.handler(request)
        } catch let error as HTTPError {
            return .error(status: error.status, code: error.code, message: error.message, traceID: request.traceID)
        } catch {
            (logger ?? Logger(label: "http")).error(
                "request handler failed",
                ["http.route": .string(route.pattern), "trace.id": .string(request.traceID), "error": .string("\(error)")])
            return .error(status: 500, code: "INTERNAL_ERROR", message: "internal error", traceID: request.traceID)
        }
    }

    /// Path segments, each percent-decoded on its own (an undecodable one is kept as sent).
    static func segments(of path: String) -> [String] {
        path.split(separator: "/").map { raw in
            raw.utf8.contains(UInt8(ascii: "%")) ? (raw.removingPercentEncoding ?? String(raw)) : String(raw)
        }
    }
}

/// One registered route.
private struct Route: Sendable {
    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    let method: String
    let pattern: String
    let segments: [Segment]
    let handler: HTTPHandler
    let metrics: RouteMetrics

    init(method: String, pattern: String, handler: @escaping HTTPHandler) {
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
