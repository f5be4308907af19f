import Foundation
import Postgres

/// What needs a person now, as the console's home page lists it: each item is a count with its
/// oldest age, and the frozen chains by name (an operator must act on each).
public struct Attention: Sendable, Codable, Equatable {
    /// A chain nothing moves on until an operator attributes or unfreezes it.
    public struct FrozenChain: Sendable, Codable, Equatable {
        public var environment: String
        public var originalTransactionId: String
        public var userId: String
        public var reason: String
        public var since: Date
    }

    /// A webhook delivery the senders gave up on, with the user its event is about.
    public struct DeadDelivery: Sendable, Codable, Equatable {
        public var endpointId: String
        public var eventId: String
        public var type: String
        /// Nil when the outbound event is no longer stored.
        public var userId: String?
        public var lastStatusCode: Int?
        public var lastError: String?
    }

    /// A charge that met another user's chain (`account.conflict`) whose chain is still frozen:
    /// the payer was charged and has nothing until an operator attributes or unfreezes it.
    public struct AccountConflict: Sendable, Codable, Equatable {
        public var environment: String
        public var originalTransactionId: String
        public var transactionId: String
        public var productId: String
        /// Who paid (the signed token's user).
        public var payerUserId: String
        /// Who holds the chain.
        public var otherUserId: String
        public var since: Date
    }

    /// DEAD events by error code, unmatched facts left out (they are listed by reason).
    public var deadEvents: [String: Int]
    /// Facts waiting for a product or an account, by reason, not replayed yet.
    public var unmatchedFacts: [String: Int]
    public var frozenChainCount: Int
    /// The longest-frozen chains first, at most `CaseStore.attentionLimit`.
    public var frozenChains: [FrozenChain]
    /// The newest open account conflicts first, at most `CaseStore.attentionLimit`.
    public var accountConflicts: [AccountConflict] = []
    /// Events received or waiting for a retry, and the oldest one's age in seconds.
    public var waitingEvents: Int
    public var oldestWaitingSeconds: Int
    /// Inbound events not yet on the broker.
    public var unpublishedInbound: Int
    public var oldestUnpublishedInboundSeconds: Int
    /// Outbound events not yet on the broker.
    public var unpublishedOutbound: Int
    public var oldestUnpublishedOutboundSeconds: Int
    /// Webhook deliveries DEAD at endpoints not deleted (outbound events have no DEAD state: the
    /// relay retries them until the broker takes them).
    public var deadDeliveryCount: Int
    /// The newest of them, at most `CaseStore.attentionLimit`.
    public var deadDeliveries: [DeadDelivery]

    /// Whether nothing at all needs attention.
    public var isClear: Bool {
        deadEvents.isEmpty && unmatchedFacts.isEmpty && frozenChainCount == 0 && waitingEvents == 0 && unpublishedInbound == 0
            && unpublishedOutbound == 0 && deadDeliveryCount == 0 && accountConflicts.isEmpty
    }
}

extension CaseStore {
    /// Chains listed by name on the home page; the count says how many more there are.
    public static let attentionLimit = 20

    /// One reading of what needs attention, each count through a partial index of its own (the
    /// DEAD deliveries': migration 0043).
    public func attention(now: Date) async throws -> Attention {
        try await pool.withConnection { db in
            let scalars = try await db.query(
                """
                SELECT
                  (SELECT count(*) FROM inbound_event WHERE process_status IN ('RECEIVED', 'RETRY_WAIT')) AS waiting,
                  (SELECT coalesce(greatest(0, floor(extract(epoch FROM \(now)::timestamptz - min(received_at)))), 0)::bigint
                     FROM inbound_event WHERE process_status IN ('RECEIVED', 'RETRY_WAIT')) AS waiting_age,
                  (SELECT count(*) FROM event_outbox) AS inbound,
                  (SELECT coalesce(greatest(0, floor(extract(epoch FROM \(now)::timestamptz - min(created_at)))), 0)::bigint
                     FROM event_outbox) AS inbound_age,
                  (SELECT count(*) FROM outbound_event WHERE published_at IS NULL) AS outbound,
                  (SELECT coalesce(greatest(0, floor(extract(epoch FROM \(now)::timestamptz - min(created_at)))), 0)::bigint
                     FROM outbound_event WHERE published_at IS NULL) AS outbound_age,
                  (SELECT count(*) FROM user_subscription WHERE frozen_reason IS NOT NULL) AS frozen,
                  (SELECT count(*) FROM webhook_delivery d JOIN webhook_endpoint e ON e.id = d.endpoint_id
                    WHERE d.status = 'DEAD' AND e.deleted_at IS NULL) AS dead_deliveries
                """
            ).single()
            var attention = Attention(
                deadEvents: [:], unmatchedFacts: [:], frozenChainCount: Int(try scalars.decode("frozen", as: Int64.self)),
                frozenChains: [], waitingEvents: Int(try scalars.decode("waiting", as: Int64.self)),
                oldestWaitingSeconds: Int(try scalars.decode("waiting_age", as: Int64.self)),
                unpublishedInbound: Int(try scalars.decode("inbound", as: Int64.self)),
                oldestUnpublishedInboundSeconds: Int(try scalars.decode("inbound_age", as: Int64.self)),
                unpublishedOutbound: Int(try scalars.decode("outbound", as: Int64.self)),
                oldestUnpublishedOutboundSeconds: Int(try scalars.decode("outbound_age", as: Int64.self)),
                deadDeliveryCount: Int(try scalars.decode("dead_deliveries", as: Int64.self)), deadDeliveries: [])
            for row in try await db.query(
                """
                SELECT coalesce(error_code, '') AS code, count(*) AS n FROM inbound_event
                 WHERE process_status = 'DEAD' AND coalesce(error_code, '') NOT LIKE 'UNMATCHED\\_%' GROUP BY 1
                """)
            {
                attention.deadEvents[try row.decode("code")] = Int(try row.decode("n", as: Int64.self))
            }
            for row in try await db.query(
                "SELECT reason, count(*) AS n FROM unmatched_fact WHERE replayed_at IS NULL GROUP BY 1")
            {
                attention.unmatchedFacts[try row.decode("reason")] = Int(try row.decode("n", as: Int64.self))
            }
            attention.frozenChains = try await db.query(
                """
                SELECT environment, original_transaction_id, user_id, frozen_reason, updated_at FROM user_subscription
                 WHERE frozen_reason IS NOT NULL ORDER BY updated_at, id LIMIT \(Self.attentionLimit)
                """
            ).map { row in
                Attention.FrozenChain(
                    environment: try row.decode("environment"), originalTransactionId: try row.decode("original_transaction_id"),
                    userId: try row.decode("user_id"), reason: try row.decode("frozen_reason"), since: try row.decode("updated_at"))
            }
            attention.deadDeliveries = try await db.query(
                """
                SELECT d.endpoint_id, d.event_id, d.type, o.user_id, d.last_status_code, d.last_error
                  FROM webhook_delivery d JOIN webhook_endpoint e ON e.id = d.endpoint_id
                  LEFT JOIN outbound_event o ON o.id = d.event_id
                 WHERE d.status = 'DEAD' AND e.deleted_at IS NULL
                 ORDER BY d.seq DESC LIMIT \(Self.attentionLimit)
                """
            ).map { row in
                Attention.DeadDelivery(
                    endpointId: try row.decode("endpoint_id"), eventId: try row.decode("event_id"), type: try row.decode("type"),
                    userId: try row.decode("user_id"), lastStatusCode: try row.decode("last_status_code"),
                    lastError: try row.decode("last_error"))
            }
            attention.accountConflicts = try await db.query(
                """
                SELECT e.environment, e.data->>'originalTransactionId' AS original, e.data->>'transactionId' AS transaction,
                       e.data->>'productId' AS product, e.user_id, e.data->>'otherUserId' AS other, e.created_at
                  FROM outbound_event e
                 WHERE e.type = 'account.conflict'
                   AND EXISTS (SELECT 1 FROM user_subscription s
                                WHERE s.environment = e.environment AND s.original_transaction_id = e.data->>'originalTransactionId'
                                  AND s.frozen_reason IS NOT NULL)
                 ORDER BY e.created_at DESC LIMIT \(Self.attentionLimit)
                """
            ).map { row in
                Attention.AccountConflict(
                    environment: try row.decode("environment"), originalTransactionId: try row.decode("original"),
                    transactionId: try row.decode("transaction"), productId: try row.decode("product"),
                    payerUserId: try row.decode("user_id"), otherUserId: try row.decode("other"), since: try row.decode("created_at"))
            }
            return attention
        }
    }
}
