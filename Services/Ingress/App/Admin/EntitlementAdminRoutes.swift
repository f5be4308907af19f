import Domain
import Foundation
import HTTPServer
import ServiceRuntime
import Storage

/// The admin API's entitlements: a user's entitlements and grants (any admin token), and
/// promotional grants and their revocation (operator tokens), each with its audit row.
struct EntitlementAdminRoutes: Sendable {
    let entitlements: EntitlementStore
    /// The deployment's environment (`APPLE_IAP_ENV`), which a grant's events carry.
    let environment: String
    let clock: any WallClock

    func registerReads(in admin: inout RouterGroup<AdminRequestContext>) {
        admin.get("users/{userId}/entitlements") { request, _ in
            .json(
                try await entitlements.overview(
                    userID: try AdminRoutes.userID(request.pathParameter("userId"), field: "userId"), now: clock.now()))
        }
    }

    func registerActions(in admin: inout RouterGroup<AdminRequestContext>) {
        admin.post("users/{userId}/entitlements/{entitlement}/grants") { request, context in
            try await grant(request, operator: try context.requirePrincipal())
        }
        admin.delete("users/{userId}/entitlements/{entitlement}/grants") { request, context in
            try await revoke(request, operator: try context.requirePrincipal())
        }
    }

    struct GrantBody: Decodable {
        let expiresAt: Date?
        let duration: String?
        let reason: String?
    }

    /// The path's user and entitlement; an entitlement outside the identifier format is 422.
    static func target(_ request: HTTPRequest) throws(HTTPError) -> (userID: String, entitlement: String) {
        let user = try AdminRoutes.userID(request.pathParameter("userId"), field: "userId")
        guard let entitlement = request.pathParameter("entitlement"), Entitlements.isIdentifier(entitlement) else {
            throw HTTPError(
                status: 422, code: "INVALID_ENTITLEMENT", message: "entitlement must be an identifier of [a-z0-9_.-], 1 to 64 characters")
        }
        return (user, entitlement)
    }

    func grant(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let (user, entitlement) = try Self.target(request)
        let body = try request.decodeJSON(GrantBody.self)
        let reason = try AdminRoutes.reason(body.reason)
        let now = clock.now()
        let expiresAt: Date
        do {
            expiresAt = try Entitlements.grantEnd(expiresAt: body.expiresAt, duration: body.duration, now: now)
        } catch {
            throw Self.httpError(for: error)
        }
        let grant = try await entitlements.grant(
            userID: user, entitlement: entitlement, expiresAt: expiresAt, environment: environment, operator: principal.name,
            reason: reason, now: now)
        // Judged after the write: the stored start may round a fraction of a microsecond past `now`.
        return .json(PromotionalGrantView(grant, now: clock.now()), status: 201)
    }

    struct RevocationAnswer: Encodable, Sendable {
        let userId: String
        let entitlement: String
        let revoked: [PromotionalGrantView]
    }

    func revoke(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let (user, entitlement) = try Self.target(request)
        let reason = try AdminRoutes.reason(try request.decodeJSON(AdminRoutes.ReasonBody.self).reason)
        let now = clock.now()
        let revoked = try await entitlements.revoke(
            userID: user, entitlement: entitlement, operator: principal.name, reason: reason, now: now)
        let after = clock.now()
        return .json(RevocationAnswer(userId: user, entitlement: entitlement, revoked: revoked.map { PromotionalGrantView($0, now: after) }))
    }

    /// The answer a refused grant end stands for.
    static func httpError(for problem: Entitlements.GrantEndProblem) -> HTTPError {
        switch problem {
        case .endOrDuration: APIError.invalidRequest("give either expiresAt (RFC 3339) or duration (ISO 8601, e.g. P7D), not both")
        case .badDuration: APIError.invalidRequest("duration must be a positive ISO 8601 duration such as P7D, P1M or PT12H")
        case .notInFuture:
            HTTPError(status: 422, code: "EXPIRY_NOT_IN_FUTURE", message: "expiresAt must be in the future; nothing granted")
        case .tooLong:
            HTTPError(status: 422, code: "GRANT_TOO_LONG", message: "a promotional grant lasts at most ten years; nothing granted")
        }
    }

    /// The answer an `EntitlementGrantError` stands for.
    static func httpError(for error: EntitlementGrantError) -> HTTPError {
        switch error {
        case .unknownUser(let user): APIError.notFound("no user \(user): nothing granted")
        case .notInFuture:
            HTTPError(status: 422, code: "EXPIRY_NOT_IN_FUTURE", message: "expiresAt must be in the future; nothing granted")
        case .nothingInForce(let user, let entitlement):
            HTTPError(
                status: 404, code: "GRANT_NOT_FOUND", message: "user \(user) has no promotional grant of \(entitlement) in force")
        }
    }
}
