import Foundation
import Postgres

/// Forwarding of Apple's notifications: its targets are endpoints of kind APPLE_FORWARD, written
/// from the configuration, so their deliveries go through the webhooks' senders, retries and views.
extension WebhookStore {
    /// A stored notification as the forwarding reads it: its signed payload still sealed.
    public struct SealedNotification: Sendable {
        public var eventID: Int64
        public var notificationUUID: String
        public var type: String
        public var environment: String
        public var sealedPayload: [UInt8]
        public var payloadKeyID: String
        /// Apple's exact request body, sealed under `payloadKeyID`, when it was kept (not the
        /// compact rebuild of the payload); nil: the rebuild is Apple's body.
        public var sealedRequestBody: [UInt8]?
    }

    /// Makes the APPLE_FORWARD endpoints what the configuration says: each target inserted or
    /// updated (URL, environments; an existing secret is kept, `secret` only seals a new one) and
    /// live again, every other one deleted. Each change has its audit row; a configuration already
    /// in place writes nothing.
    public func configureForwards(
        _ targets: [(id: String, url: String, environments: [String]?, secret: SealedSecret)], operator operatorName: String
    ) async throws {
        try await pool.transaction { db in
            var changed: [PostgresRow] = []
            for target in targets {
                changed += try await db.query(
                    """
                    INSERT INTO webhook_endpoint (id, kind, url, environments, description, secret_key_id, secret_sealed)
                    VALUES (\(target.id), \(EndpointKind.appleForward.rawValue), \(target.url),
                            \(target.environments.map { PostgresArray($0) })::text[],
                            'Apple notifications forwarded (APPLE_NOTIFICATION_FORWARD_URL)', \(target.secret.keyID),
                            \(target.secret.sealed))
                    ON CONFLICT (id) DO UPDATE
                       SET url = EXCLUDED.url, environments = EXCLUDED.environments, deleted_at = NULL
                     WHERE webhook_endpoint.kind = EXCLUDED.kind
                       AND (webhook_endpoint.url, webhook_endpoint.environments, webhook_endpoint.deleted_at IS NULL)
                           IS DISTINCT FROM (EXCLUDED.url, EXCLUDED.environments, true)
                    RETURNING \(sql: Self.endpointColumns)
                    """)
            }
            let removed = try await db.query(
                """
                UPDATE webhook_endpoint SET deleted_at = now()
                 WHERE kind = \(EndpointKind.appleForward.rawValue) AND deleted_at IS NULL
                   AND id <> ALL (\(PostgresArray(targets.map(\.id)))::text[])
                RETURNING \(sql: Self.endpointColumns)
                """)
            for row in changed {
                try await audit.record(
                    on: db, operator: operatorName, action: "apple-forward.configure", reason: "forwarding configured", before: nil,
                    after: AuditState(try Self.endpoint(row)))
            }
            for row in removed {
                try await audit.record(
                    on: db, operator: operatorName, action: "apple-forward.remove", reason: "forwarding no longer configured",
                    before: AuditState(try Self.endpoint(row)), after: nil)
            }
        }
    }

    /// The notifications among these inbound events whose payload is still stored (a redacted one
    /// has nothing left to forward; a client's submission is no notification).
    public func notificationsToForward(_ eventIDs: [Int64]) async throws -> [SealedNotification] {
        guard !eventIDs.isEmpty else { return [] }
        return try await pool.query(
            """
            SELECT id, notification_uuid, notification_type, environment, signed_payload, payload_key_id, request_body
              FROM inbound_event
             WHERE id = ANY (\(PostgresArray(eventIDs))::bigint[]) AND kind = 'notification'
               AND signed_payload IS NOT NULL AND payload_key_id IS NOT NULL
            """
        ).map { row in
            SealedNotification(
                eventID: try row.decode("id"), notificationUUID: try row.decode("notification_uuid"),
                type: try row.decode("notification_type"), environment: try row.decode("environment"),
                sealedPayload: try row.decode("signed_payload"), payloadKeyID: try row.decode("payload_key_id"),
                sealedRequestBody: try row.decode("request_body"))
        }
    }
}
