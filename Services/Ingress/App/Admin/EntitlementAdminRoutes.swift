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

    /// A promotional grant may last at most this long (ten years): a typo in a date should not give forever.
    static let longestGrant: TimeInterval = 10 * 366 * 24 * 3600

    func registerReads(in admin: inout RouterGroup<AdminRequestContext>) {
        admin.get("users/{userId}/entitlements") { request, _ in
            .json(try await overview(userID: try AdminRoutes.userID(request.pathParameter("userId"), field: "userId")))
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

    /// A promotional grant as the admin API and `subsctl --json` show it.
    struct GrantView: Encodable, Sendable {
        let grantId: Int64
        let userId: String
        let entitlement: String
        let startsAt: Date
        let expiresAt: Date
        let reason: String
        let grantedBy: String
        let createdAt: Date
        @ExplicitNull var revokedAt: Date?
        @ExplicitNull var revokedBy: String?
        @ExplicitNull var revokeReason: String?
        @ExplicitNull var endedAt: Date?
        /// Whether it gives its entitlement now.
        let inForce: Bool

        init(_ grant: PromotionalGrant, now: Date) {
            grantId = grant.grantID
            userId = grant.userID
            entitlement = grant.entitlement
            startsAt = grant.startsAt
            expiresAt = grant.expiresAt
            reason = grant.reason
            grantedBy = grant.grantedBy
            createdAt = grant.createdAt
            revokedAt = grant.revokedAt
            revokedBy = grant.revokedBy
            revokeReason = grant.revokeReason
            endedAt = grant.endedAt
            inForce = grant.isInForce(at: now)
        }
    }

    /// What a user may use now, in words and in items, and every promotional grant they had.
    struct Overview: Encodable, Sendable {
        let userId: String
        let summary: String
        let entitlements: [EntitlementRoutes.ItemView]
        let grants: [GrantView]
    }

    func overview(userID: String) async throws -> Overview {
        let now = clock.now()
        let items = try await entitlements.entitlements(userID: userID, now: now)
        let grants = try await entitlements.grants(userID: userID)
        return Overview(
            userId: userID, summary: Entitlements.summary(items), entitlements: items.map(EntitlementRoutes.ItemView.init),
            grants: grants.map { GrantView($0, now: now) })
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
        switch (body.expiresAt, body.duration) {
        case (let date?, nil):
            expiresAt = date
        case (nil, let duration?):
            guard let end = Entitlements.end(of: duration, from: now) else {
                throw APIError.invalidRequest("duration must be a positive ISO 8601 duration such as P7D, P1M or PT12H")
            }
            expiresAt = end
        default:
            throw APIError.invalidRequest("give either expiresAt (RFC 3339) or duration (ISO 8601, e.g. P7D), not both")
        }
        guard expiresAt > now else {
            throw HTTPError(status: 422, code: "EXPIRY_NOT_IN_FUTURE", message: "expiresAt must be in the future; nothing granted")
        }
        guard expiresAt.timeIntervalSince(now) <= Self.longestGrant else {
            throw HTTPError(status: 422, code: "GRANT_TOO_LONG", message: "a promotional grant lasts at most ten years; nothing granted")
        }
        let grant = try await entitlements.grant(
            userID: user, entitlement: entitlement, expiresAt: expiresAt, environment: environment, operator: principal.name,
            reason: reason, now: now)
        // Judged after the write: the stored start may round a fraction of a microsecond past `now`.
        return .json(GrantView(grant, now: clock.now()), status: 201)
    }

    struct RevocationAnswer: Encodable, Sendable {
        let userId: String
        let entitlement: String
        let revoked: [GrantView]
    }

    func revoke(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let (user, entitlement) = try Self.target(request)
        let reason = try AdminRoutes.reason(try request.decodeJSON(AdminRoutes.ReasonBody.self).reason)
        let now = clock.now()
        let revoked = try await entitlements.revoke(
            userID: user, entitlement: entitlement, operator: principal.name, reason: reason, now: now)
        let after = clock.now()
        return .json(RevocationAnswer(userId: user, entitlement: entitlement, revoked: revoked.map { GrantView($0, now: after) }))
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
