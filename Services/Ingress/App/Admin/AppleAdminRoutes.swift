import AppStore
import AppleOperations
import Foundation
import HTTPServer
import Pipeline
import Storage

/// `/admin/v1/apple/extend-all`: a mass renewal-date extension at Apple (the admin twin of
/// `subsctl apple extend-all`) for operators, and its progress as Apple reports it for any admin
/// token. Without the App Store Server API key (`APPLE_IAP_KEY_ID` …) both answer 503.
struct AppleAdminRoutes: Sendable {
    /// nil when the ingress has no App Store Server API key.
    let extensions: MassRenewalExtension?

    func register(in router: inout Router<AdminRequestContext>, authenticator: AdminAuthenticator) {
        router.group("/admin/v1", middleware: [AdminAuthentication(authenticator: authenticator, requiredRole: .viewer)]) {
            $0.get("apple/extend-all/{requestIdentifier}") { request, _ in try await status(request) }
        }
        router.group("/admin/v1", middleware: [AdminAuthentication(authenticator: authenticator, requiredRole: .operator)]) {
            $0.post("apple/extend-all") { request, context in try await extend(request, operator: try context.requirePrincipal()) }
        }
    }

    struct ExtendBody: Decodable {
        let productId: String?
        let extendByDays: Int32?
        let extendReasonCode: Int32?
        let storefrontCountryCodes: [String]?
        let requestIdentifier: String?
        let reason: String?
    }

    func configured() throws(HTTPError) -> MassRenewalExtension {
        guard let extensions else {
            throw HTTPError(
                status: 503, code: "APPLE_API_NOT_CONFIGURED",
                message: "the App Store Server API key is not configured (APPLE_IAP_KEY_ID, APPLE_IAP_ISSUER_ID, APPLE_IAP_PRIVATE_KEY_PATH)")
        }
        return extensions
    }

    /// 202 when Apple accepted the request now, 200 when it had already (the same request again).
    func extend(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let extensions = try configured()
        let body = try request.decodeJSON(ExtendBody.self)
        let reason = try AdminRoutes.reason(body.reason)
        guard let productId = body.productId else { throw APIError.invalidRequest("productId is required") }
        guard let days = body.extendByDays else { throw APIError.invalidRequest("extendByDays is required (1 to 90)") }
        var identifier: UUID?
        if let text = body.requestIdentifier {
            guard let parsed = UUID(uuidString: text) else { throw APIError.invalidRequest("requestIdentifier must be a UUID") }
            identifier = parsed
        }
        do {
            let submission = try await extensions.submit(
                try extensions.request(
                    productId: productId, extendByDays: days, extendReasonCode: body.extendReasonCode ?? 3,
                    storefrontCountryCodes: body.storefrontCountryCodes, reason: reason, requestedBy: principal.name,
                    requestIdentifier: identifier))
            return .json(RenewalExtensionSummary(submission.record, sent: submission.sent), status: submission.sent ? 202 : 200)
        } catch let refusal as MassRenewalExtension.Refusal {
            throw Self.httpError(for: refusal)
        }
    }

    func status(_ request: HTTPRequest) async throws -> HTTPResponse {
        let extensions = try configured()
        guard let text = request.pathParameter("requestIdentifier"), let identifier = UUID(uuidString: text) else {
            throw APIError.invalidRequest("requestIdentifier must be a UUID")
        }
        do {
            guard let record = try await extensions.refresh(identifier) else {
                throw HTTPError(status: 404, code: "EXTENSION_NOT_FOUND", message: "no mass extension request \(text.lowercased())")
            }
            return .json(RenewalExtensionSummary(record))
        } catch let refusal as MassRenewalExtension.Refusal {
            throw Self.httpError(for: refusal)
        }
    }

    /// Apple's refusals keep Apple's code in the message; a retryable one is 503 (try again).
    static func httpError(for refusal: MassRenewalExtension.Refusal) -> HTTPError {
        switch refusal {
        case .invalid(let message): APIError.invalidRequest(message)
        case .identifierInUse(let record):
            HTTPError(
                status: 409, code: "REQUEST_IDENTIFIER_IN_USE",
                message: "requestIdentifier \(record.request.requestIdentifier.uuidString.lowercased()) names another extension"
                    + " (\(record.request.productId), \(record.request.extendByDays) days)")
        case .apple(let error) where error.isRetryable:
            HTTPError(status: 503, code: "APPLE_UNAVAILABLE", message: "Apple did not answer; nothing was lost, retry: \(error)")
        case .apple(let error): HTTPError(status: 502, code: "APPLE_REFUSED", message: "Apple refused: \(error)")
        }
    }
}
