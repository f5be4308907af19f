/// Code that runs around the handlers of a router or route group: it may answer on its own
/// (refuse a request), amend the request or its context before calling `next`, or map what
/// `next` answered or threw.
public protocol RouterMiddleware<Context>: Sendable {
    associatedtype Context: RequestContext
    func handle(
        _ request: HTTPRequest, context: Context, next: (HTTPRequest, Context) async throws -> HTTPResponse
    ) async throws -> HTTPResponse
}

/// The handler of a route once middleware is wrapped around it.
public typealias RouteHandler<Context: RequestContext> = @Sendable (HTTPRequest, Context) async throws -> HTTPResponse

extension Array {
    /// `handler` inside these middleware, the first one outermost. Composed once, when a route
    /// is added, so a request pays no allocation for it.
    func wrapping<Context>(_ handler: @escaping RouteHandler<Context>) -> RouteHandler<Context>
    where Element == any RouterMiddleware<Context> {
        reversed().reduce(handler) { next, middleware in
            { request, context in try await middleware.handle(request, context: context, next: next) }
        }
    }
}
