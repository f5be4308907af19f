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
    /// One configured credential as the checks see it: never the token itself.
    struct Credential: Sendable {
        let principal: AdminPrincipal
        /// SHA-256 of the token: what a presented bearer token is compared with.
        let tokenDigest: [UInt8]
        /// SHA-256 of `name:token`: how a console session names the credential that opened it, so
        /// removing the credential, changing its token or renaming it closes its sessions.
        let sessionDigest: [UInt8]
    }

    private let credentials: [Credential]

    init(settings: AdminSettings) {
        credentials = settings.credentials.map {
            Credential(
                principal: AdminPrincipal(name: $0.name, role: $0.role), tokenDigest: SHA256.hash(Array($0.token.utf8)),
                sessionDigest: SHA256.hash(Array("\($0.name):\($0.token)".utf8)))
        }
    }

    /// The configured credential of a presented token, or nil.
    func credential(token: String) -> Credential? {
        let presented = SHA256.hash(Array(token.utf8))
        return match { constantTimeEquals($0.tokenDigest, presented) }
    }

    /// The principal of a console session's credential while it is still configured, or nil.
    func principal(sessionDigest: [UInt8]) -> AdminPrincipal? {
        match { constantTimeEquals($0.sessionDigest, sessionDigest) }?.principal
    }

    /// Every credential is compared, even after a match: the time taken does not say which matched.
    private func match(_ matches: (Credential) -> Bool) -> Credential? {
        var found: Credential?
        for credential in credentials where matches(credential) && found == nil {
            found = credential
        }
        return found
    }

    /// The principal of the request's `Authorization: Bearer` token.
    func authenticate(_ request: HTTPRequest) throws(HTTPError) -> AdminPrincipal {
        guard let header = request.header("authorization"), header.count > 7,
            header.prefix(7).lowercased() == "bearer "
        else { throw APIError.unauthorized("an admin bearer token is required") }
        let token = header.dropFirst(7).trimmingCharacters(in: .whitespaces)
        guard let credential = credential(token: token) else { throw APIError.unauthorized("not an admin token") }
        return credential.principal
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
