import HTTPServer
import Postgres

/// User routes: the bearer token must be a valid user token; its user goes into the context.
struct UserAuthentication: RouterMiddleware {
    let authenticator: UserAuthenticator

    func handle(
        _ request: HTTPRequest, context: IngressRequestContext,
        next: (HTTPRequest, IngressRequestContext) async throws -> HTTPResponse
    ) async throws -> HTTPResponse {
        var context = context
        context.user = try await authenticator.authenticate(request)
        return try await next(request, context)
    }
}

/// Metering routes: the bearer token must be a configured service token (a user token never is).
struct ServiceAuthentication: RouterMiddleware {
    let authenticator: ServiceAuthenticator

    func handle(
        _ request: HTTPRequest, context: IngressRequestContext,
        next: (HTTPRequest, IngressRequestContext) async throws -> HTTPResponse
    ) async throws -> HTTPResponse {
        var context = context
        context.service = try authenticator.authenticate(request)
        return try await next(request, context)
    }
}

/// Database trouble is the client's cue to retry (503); a value the database cannot hold
/// (SQLSTATE class 22: NUL characters, overlong text) is the client's mistake (400); every other
/// error passes through. For the public and the admin router alike.
struct DatabaseErrors<Context: RequestContext>: RouterMiddleware {
    func handle(
        _ request: HTTPRequest, context: Context,
        next: (HTTPRequest, Context) async throws -> HTTPResponse
    ) async throws -> HTTPResponse {
        do {
            return try await next(request, context)
        } catch let error as PostgresError where error.isRetryable {
            throw APIError.serviceUnavailable()
        } catch let error as PostgresError where error.isDataException {
            throw APIError.invalidRequest("a value in the request is not acceptable")
        }
    }
}
