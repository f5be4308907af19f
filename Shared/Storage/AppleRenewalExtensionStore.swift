import Foundation
import Postgres

/// The SQL of `apple_renewal_extension`: the mass renewal-date extensions asked of Apple, their
/// submission and the last status Apple reported.
public struct AppleRenewalExtensionStore: Sendable {
    /// What was asked: the request identifier Apple receives and its parameters.
    public struct Request: Sendable, Codable, Equatable {
        public var requestIdentifier: UUID
        public var environment: String
        public var productId: String
        public var extendByDays: Int32
        public var extendReasonCode: Int32
        /// nil: every storefront.
        public var storefrontCountryCodes: [String]?
        public var reason: String
        public var requestedBy: String

        public init(
            requestIdentifier: UUID, environment: String, productId: String, extendByDays: Int32, extendReasonCode: Int32,
            storefrontCountryCodes: [String]?, reason: String, requestedBy: String
        ) {
            self.requestIdentifier = requestIdentifier
            self.environment = environment
            self.productId = productId
            self.extendByDays = extendByDays
            self.extendReasonCode = extendReasonCode
            self.storefrontCountryCodes = storefrontCountryCodes
            self.reason = reason
            self.requestedBy = requestedBy
        }

        /// The same extension: everything but who asked and why.
        public func sameExtension(as other: Request) -> Bool {
            requestIdentifier == other.requestIdentifier && environment == other.environment && productId == other.productId
                && extendByDays == other.extendByDays && extendReasonCode == other.extendReasonCode
                && storefrontCountryCodes == other.storefrontCountryCodes
        }
    }

    /// A request as stored, with its submission and Apple's last reported status.
    public struct Record: Sendable, Codable, Equatable {
        public var request: Request
        public var createdAt: Date
        public var submittedAt: Date?
        public var lastError: String?
        public var complete: Bool
        public var completeDate: Date?
        public var succeededCount: Int64?
        public var failedCount: Int64?
        public var checkedAt: Date?
    }

    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Records `request` unless its identifier is known; returns the stored row (the earlier one
    /// when there was one) and whether this call created it.
    public func begin(_ request: Request, now: Date) async throws -> (record: Record, created: Bool) {
        let storefronts = request.storefrontCountryCodes?.joined(separator: ",")
        let inserted = try await pool.query(
            """
            INSERT INTO apple_renewal_extension (request_identifier, environment, product_id, extend_by_days, extend_reason_code,
                storefront_country_codes, reason, requested_by, created_at)
            VALUES (\(request.requestIdentifier), \(request.environment), \(request.productId), \(request.extendByDays),
                \(request.extendReasonCode), \(storefronts), \(request.reason), \(request.requestedBy), \(now))
            ON CONFLICT (request_identifier) DO NOTHING
            RETURNING \(sql: Self.columns)
            """
        ).first.map(Self.record)
        if let inserted { return (inserted, true) }
        // The row that conflicted is never deleted, so it is there to read.
        guard let existing = try await record(request.requestIdentifier) else { return try await begin(request, now: now) }
        return (existing, false)
    }

    /// Apple accepted the request, on the caller's transaction (which writes its audit row too).
    public func markSubmitted(_ identifier: UUID, now: Date, on db: PostgresConnection) async throws {
        try await db.query(
            """
            UPDATE apple_renewal_extension SET submitted_at = COALESCE(submitted_at, \(now)), last_error = NULL
             WHERE request_identifier = \(identifier)
            """)
    }

    /// Apple refused the request or could not be reached; it stays unsubmitted.
    public func markFailed(_ identifier: UUID, error: String, on db: PostgresConnection) async throws {
        try await db.query("UPDATE apple_renewal_extension SET last_error = \(error) WHERE request_identifier = \(identifier)")
    }

    /// Apple's status as read at `now`; a completed request never goes back to incomplete.
    @discardableResult
    public func recordStatus(
        _ identifier: UUID, complete: Bool, completeDate: Date?, succeededCount: Int64?, failedCount: Int64?, now: Date
    ) async throws -> Record? {
        try await pool.query(
            """
            UPDATE apple_renewal_extension
               SET complete = complete OR \(complete), complete_date = COALESCE(\(completeDate), complete_date),
                   succeeded_count = COALESCE(\(succeededCount), succeeded_count),
                   failed_count = COALESCE(\(failedCount), failed_count), checked_at = \(now)
             WHERE request_identifier = \(identifier)
            RETURNING \(sql: Self.columns)
            """
        ).first.map(Self.record)
    }

    public func record(_ identifier: UUID) async throws -> Record? {
        try await pool.query(
            "SELECT \(sql: Self.columns) FROM apple_renewal_extension WHERE request_identifier = \(identifier)"
        ).first.map(Self.record)
    }

    private static let columns: StaticString = """
        request_identifier, environment, product_id, extend_by_days, extend_reason_code, storefront_country_codes, reason,
        requested_by, created_at, submitted_at, last_error, complete, complete_date, succeeded_count, failed_count, checked_at
        """

    private static func record(_ row: PostgresRow) throws -> Record {
        let storefronts: String? = try row.decode("storefront_country_codes")
        return Record(
            request: Request(
                requestIdentifier: try row.decode("request_identifier"), environment: try row.decode("environment"),
                productId: try row.decode("product_id"), extendByDays: try row.decode("extend_by_days"),
                extendReasonCode: try row.decode("extend_reason_code"),
                storefrontCountryCodes: storefronts.map { $0.split(separator: ",").map(String.init) }, reason: try row.decode("reason"),
                requestedBy: try row.decode("requested_by")),
            createdAt: try row.decode("created_at"), submittedAt: try row.decode("submitted_at"), lastError: try row.decode("last_error"),
            complete: try row.decode("complete"), completeDate: try row.decode("complete_date"),
            succeededCount: try row.decode("succeeded_count"), failedCount: try row.decode("failed_count"),
            checkedAt: try row.decode("checked_at"))
    }
}
