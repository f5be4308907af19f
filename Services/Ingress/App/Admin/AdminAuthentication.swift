import Crypto
import Foundation
import HTTPServer
import ServiceRuntime

/// Who called the admin API: the configured token's name (the operator in audit rows) and role.
struct AdminPrincipal: Sendable, Equatable {
    let name: String
    let role: AdminRole
}

/// What the admin router's middleware established for one request.
struct AdminRequestContext: RequestContext {
    let traceID: String
    var logger: Logger
    /// Set by `AdminAuthentication` and `ConsoleSession`.
    var principal: AdminPrincipal?
    /// The console session's CSRF token, set by `ConsoleSession` for the forms of its pages.
    var csrf: String?

    init(traceID: String, logger: Logger) {
        self.traceID = traceID
        self.logger = logger
    }

    /// The authenticated caller; a route outside the authenticated groups has none.
    func requirePrincipal() throws(HTTPError) -> AdminPrincipal {
        guard let principal else { throw APIError.unauthorized("an admin bearer token is required") }
        return principal
    }
}

/// Verifies admin credentials (`ADMIN_TOKENS`). The presented token is compared with every
/// configured one through its SHA-256 digest and `constantTimeEquals`, so neither where a token
/// differs nor how long it is shows in the timing.
struct AdminAuthenticator: Sendable {
    private let credentials: [(principal: AdminPrincipal, digest: [UInt8])]

    init(settings: AdminSettings) {
        credentials = settings.credentials.map {
            (AdminPrincipal(name: $0.name, role: $0.role), SHA256.hash(Array($0.token.utf8)))
        }
    }

    /// The principal of a presented token, or nil.
    func principal(token: String) -> AdminPrincipal? {
        let presented = SHA256.hash(Array(token.utf8))
        var match: AdminPrincipal?
        for credential in credentials where constantTimeEquals(credential.digest, presented) && match == nil {
            match = credential.principal
        }
        return match
    }

    /// The principal of the request's `Authorization: Bearer` token.
    func authenticate(_ request: HTTPRequest) throws(HTTPError) -> AdminPrincipal {
        guard let header = request.header("authorization"), header.count > 7,
            header.prefix(7).lowercased() == "bearer "
        else { throw APIError.unauthorized("an admin bearer token is required") }
        let token = header.dropFirst(7).trimmingCharacters(in: .whitespaces)
        guard let principal = principal(token: token) else { throw APIError.unauthorized("not an admin token") }
        return principal
    }
}

/// Admin routes: a configured admin token (401 otherwise); actions need the operator role (403
/// for a viewer).
struct AdminAuthentication: RouterMiddleware {
    let authenticator: AdminAuthenticator
    let requiredRole: AdminRole

    func handle(
        _ request: HTTPRequest, context: AdminRequestContext,
        next: (HTTPRequest, AdminRequestContext) async throws -> HTTPResponse
    ) async throws -> HTTPResponse {
        var context = context
        let principal = try authenticator.authenticate(request)
        if requiredRole == .operator && principal.role != .operator {
            throw APIError.forbidden("this action needs an operator token")
        }
        context.principal = principal
        return try await next(request, context)
    }
}
