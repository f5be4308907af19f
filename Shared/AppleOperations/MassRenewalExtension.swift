import AppStore
import Crypto
import Foundation
import Postgres
import ServiceRuntime
import Storage

/// Extends the renewal date of every active subscriber of a product at Apple (compensation after an
/// outage), once per request: the request is recorded before Apple is asked, a request Apple
/// already accepted is never sent again, and Apple's progress is read back into the record.
/// `subsctl apple extend-all` and `POST /admin/v1/apple/extend-all` both go through it.
public struct MassRenewalExtension: Sendable {
    /// Why a request was not sent.
    public enum Refusal: Error, Sendable {
        /// The parameters break Apple's rules (days 1–90, reason code 0–3, alpha-3 storefronts).
        case invalid(String)
        /// The request identifier was used for another extension.
        case identifierInUse(AppleRenewalExtensionStore.Record)
        /// Apple refused or could not be reached; the request stays recorded and unsubmitted.
        case apple(AppStoreAPIError)
    }

    /// What `submit` did.
    public struct Submission: Sendable {
        public var record: AppleRenewalExtensionStore.Record
        /// false: Apple had already accepted this request, nothing was sent.
        public var sent: Bool
    }

    /// The audit action of a mass extension Apple accepted or refused.
    public static let auditAction = "RENEWAL_DATES_EXTENDED_FOR_ALL"

    public let client: AppStoreServerAPIClient
    public let store: AppleRenewalExtensionStore
    public let clock: any WallClock

    public init(client: AppStoreServerAPIClient, store: AppleRenewalExtensionStore, clock: any WallClock = SystemClock()) {
        self.client = client
        self.store = store
        self.clock = clock
    }

    /// The request of these parameters, checked against Apple's rules. Without an identifier, one
    /// derived from the parameters and the reason: running the same command twice (after a lost
    /// answer, a crash) names the same request, so the second run only follows the first.
    public func request(
        productId: String, extendByDays: Int32, extendReasonCode: Int32, storefrontCountryCodes: [String]?, reason: String,
        requestedBy: String, requestIdentifier: UUID?
    ) throws(Refusal) -> AppleRenewalExtensionStore.Request {
        let productId = productId.trimmingCharacters(in: .whitespaces)
        let reason = reason.trimmingCharacters(in: .whitespacesAndNewlines)
        // Apple's product identifiers: letters, digits, '.', '_' and '-' (it also goes into the status path).
        let productCharacters = productId.utf8.allSatisfy { byte in
            (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte) || byte == 46 || byte == 95 || byte == 45
        }
        guard (1...100).contains(productId.utf8.count), productCharacters else {
            throw .invalid("productId must be the product's identifier (letters, digits, '.', '_', '-'; at most 100)")
        }
        guard (1...90).contains(extendByDays) else { throw .invalid("extendByDays must be 1 to 90 (Apple's limit)") }
        guard (0...3).contains(extendReasonCode) else {
            throw .invalid("extendReasonCode must be 0 (undeclared), 1 (customer satisfaction), 2 (other) or 3 (service issue)")
        }
        guard !reason.isEmpty else { throw .invalid("reason is required: say why, for the audit trail") }
        let storefronts = storefrontCountryCodes.map { $0.map { $0.uppercased() } }
        if let storefronts {
            guard !storefronts.isEmpty,
                storefronts.allSatisfy({ $0.utf8.count == 3 && $0.utf8.allSatisfy { (65...90).contains($0) } })
            else { throw .invalid("storefrontCountryCodes must be ISO 3166-1 alpha-3 codes (USA, FRA, …)") }
        }
        let environment = client.configuration.environment.rawValue
        let identifier =
            requestIdentifier
            ?? Self.derivedIdentifier(
                [environment, productId, String(extendByDays), String(extendReasonCode), storefronts?.joined(separator: ",") ?? "*", reason])
        return AppleRenewalExtensionStore.Request(
            requestIdentifier: identifier, environment: environment, productId: productId, extendByDays: extendByDays,
            extendReasonCode: extendReasonCode, storefrontCountryCodes: storefronts, reason: reason, requestedBy: requestedBy)
    }

    /// A UUID (version 8, RFC 9562) from the SHA-256 of the parts.
    static func derivedIdentifier(_ parts: [String]) -> UUID {
        var bytes = SHA256.hash(Array(("apple-extend-all\u{0}" + parts.joined(separator: "\u{0}")).utf8)).prefix(16).map { $0 }
        bytes[6] = (bytes[6] & 0x0F) | 0x80
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10],
                bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }

    /// Records the request and asks Apple, unless Apple already accepted it. The audit row
    /// commits with the submission (or with the refusal, which stays recorded for the next run).
    public func submit(_ request: AppleRenewalExtensionStore.Request) async throws -> Submission {
        let (record, _) = try await store.begin(request, now: clock.now())
        guard record.request.sameExtension(as: request) else { throw Refusal.identifierInUse(record) }
        if record.submittedAt != nil { return Submission(record: record, sent: false) }
        let identifier = request.requestIdentifier.uuidString.lowercased()
        let audit = AuditLog(pool: store.pool)
        do throws(AppStoreAPIError) {
            _ = try await client.extendRenewalDateForAllActiveSubscribers(
                MassExtendRenewalDateRequest(
                    extendByDays: request.extendByDays, extendReasonCode: request.extendReasonCode, requestIdentifier: identifier,
                    storefrontCountryCodes: request.storefrontCountryCodes, productId: request.productId))
        } catch {
            try await store.pool.transaction { db in
                try await store.markFailed(request.requestIdentifier, error: error.description, on: db)
                try await audit.record(
                    on: db, operator: request.requestedBy, action: Self.auditAction, reason: request.reason, before: request,
                    after: ["accepted": "false", "error": error.description])
            }
            throw Refusal.apple(error)
        }
        let now = clock.now()
        try await store.pool.transaction { db in
            try await store.markSubmitted(request.requestIdentifier, now: now, on: db)
            try await audit.record(
                on: db, operator: request.requestedBy, action: Self.auditAction, reason: request.reason, before: request,
                after: ["accepted": "true", "requestIdentifier": identifier])
        }
        return Submission(record: try await store.record(request.requestIdentifier) ?? record, sent: true)
    }

    /// The record with Apple's current status read into it (as stored when Apple was not asked
    /// yet, or already reported it complete); nil for an unknown identifier.
    public func refresh(_ identifier: UUID) async throws -> AppleRenewalExtensionStore.Record? {
        guard let record = try await store.record(identifier) else { return nil }
        guard record.submittedAt != nil, !record.complete else { return record }
        let status: MassExtendRenewalDateStatusResponse
        do throws(AppStoreAPIError) {
            status = try await client.getStatusOfSubscriptionRenewalDateExtensions(
                productId: record.request.productId, requestIdentifier: identifier.uuidString.lowercased())
        } catch { throw Refusal.apple(error) }
        return try await store.recordStatus(
            identifier, complete: status.complete ?? false, completeDate: status.completeDate, succeededCount: status.succeededCount,
            failedCount: status.failedCount, now: clock.now()) ?? record
    }
}

/// A mass extension request as recorded, with Apple's last reported status: the answer of
/// `subsctl apple extend-all --json` and of `/admin/v1/apple/extend-all`.
public struct RenewalExtensionSummary: Encodable, Sendable {
    public let requestIdentifier: String
    public let productId: String
    public let extendByDays: Int32
    public let extendReasonCode: Int32
    public let storefrontCountryCodes: [String]?
    public let requestedBy: String
    public let createdAt: Date
    public let submittedAt: Date?
    public let lastError: String?
    public let complete: Bool
    public let completeDate: Date?
    public let succeededCount: Int64?
    public let failedCount: Int64?
    public let checkedAt: Date?
    /// On a submission: false when Apple had already accepted this request (nothing sent again).
    public let sent: Bool?

    public init(_ record: AppleRenewalExtensionStore.Record, sent: Bool? = nil) {
        requestIdentifier = record.request.requestIdentifier.uuidString.lowercased()
        productId = record.request.productId
        extendByDays = record.request.extendByDays
        extendReasonCode = record.request.extendReasonCode
        storefrontCountryCodes = record.request.storefrontCountryCodes
        requestedBy = record.request.requestedBy
        createdAt = record.createdAt
        submittedAt = record.submittedAt
        lastError = record.lastError
        complete = record.complete
        completeDate = record.completeDate
        succeededCount = record.succeededCount
        failedCount = record.failedCount
        checkedAt = record.checkedAt
        self.sent = sent
    }
}
