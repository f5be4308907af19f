import Events
import Foundation
import Postgres
import ServiceRuntime

/// A notification to store: its columns of `inbound_event`.
public struct NewNotificationEvent: Sendable {
    public var notificationUUID: String
    public var notificationType: String
    public var subtype: String?
    public var environment: String
    public var signedDate: Date?
    public var transactionID: String?
    public var originalTransactionID: String?
    /// Kafka key: the original transaction id, else the notification UUID.
    public var routingKey: String
    public var sealedPayload: [UInt8]?
    public var payloadKeyID: String?
    public var traceID: String?
    /// Hex SHA-256 of the signed content (the JWS signing input): tells a re-delivery from another
    /// notification reusing the UUID.
    public var payloadHash: String?
    /// Apple's exact request body, sealed like the payload (same key id), kept only for a
    /// notification that is forwarded and whose body is not the compact rebuild of its payload.
    public var sealedRequestBody: [UInt8]?

    public init(
        notificationUUID: String, notificationType: String, subtype: String? = nil, environment: String,
        signedDate: Date? = nil, transactionID: String? = nil, originalTransactionID: String? = nil,
        routingKey: String, sealedPayload: [UInt8]? = nil, payloadKeyID: String? = nil, traceID: String? = nil,
        payloadHash: String? = nil
    ) {
        self.notificationUUID = notificationUUID
        self.notificationType = notificationType
        self.subtype = subtype
        self.environment = environment
        self.signedDate = signedDate
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.routingKey = routingKey
        self.sealedPayload = sealedPayload
        self.payloadKeyID = payloadKeyID
        self.traceID = traceID
        self.payloadHash = payloadHash
    }

    /// Text PostgreSQL cannot store (a NUL character), in any column; nil when every one is fine.
    /// Checked before a row joins a shared commit, which one bad row would fail for all.
    public var unstorableField: String? {
        let fields: [(String, String?)] = [
            ("notificationUUID", notificationUUID), ("notificationType", notificationType), ("subtype", subtype),
            ("environment", environment), ("transactionId", transactionID),
            ("originalTransactionId", originalTransactionID), ("routingKey", routingKey), ("traceId", traceID),
        ]
        return fields.first { $0.1?.utf8.contains(0) == true }?.0
    }
}

/// A signed transaction a client uploaded (`CLIENT`, for an order) or observed (`OBSERVED`).
public struct NewSubmission: Sendable {
    public var kind: String
    /// The logged-in user who sent it (attribution is by the signed appAccountToken, not by this).
    public var userID: String
    public var orderNo: String?
    public var environment: String
    public var transactionID: String
    public var originalTransactionID: String
    /// Hex SHA-256 of the signed content (the JWS signing input, so a re-encoded signature is the
    /// same upload); with the kind, user and order it identifies a repeated upload.
    public var payloadHash: String
    public var sealedPayload: [UInt8]
    public var payloadKeyID: String
    public var traceID: String?

    public init(
        kind: String, userID: String, orderNo: String?, environment: String, transactionID: String,
        originalTransactionID: String, payloadHash: String, sealedPayload: [UInt8], payloadKeyID: String,
        traceID: String?
    ) {
        self.kind = kind
        self.userID = userID
        self.orderNo = orderNo
        self.environment = environment
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.payloadHash = payloadHash
        self.sealedPayload = sealedPayload
        self.payloadKeyID = payloadKeyID
        self.traceID = traceID
    }
}

/// A message waiting in the outbox to be published.
public struct OutboxEntry: Sendable, Equatable {
    public var id: Int64
    public var envelope: EventEnvelope
    public var topic: String
    public var routingKey: String
}

/// Result of storing an inbound event.
public struct StoredEvent: Sendable, Equatable {
    public var eventID: Int64
    /// False when the event was already stored (a duplicate delivery): nothing new was written.
    public var isNew: Bool
    /// The outbox row to publish and then delete; nil for a duplicate.
    public var outbox: OutboxEntry?
    /// A duplicate UUID whose signed content differs from the stored one (recorded in
    /// `notification_uuid_conflict`; the stored notification stays).
    public var conflicting = false
}

/// An event row a worker holds under a lease.
public struct ClaimedEvent: Sendable {
    public var kind: EventKind
    public var id: Int64
    /// Number of earlier failed attempts.
    public var retryCount: Int
    public var routingKey: String
    public var traceID: String?
    /// Read with the claim, so applying the event costs no extra query.
    public var payload: EventPayload
}

/// What an event row holds for the worker: the sealed signed payload and where it came from.
public struct EventPayload: Sendable {
    /// AES-256-GCM ciphertext of the JWS; nil once the retention job redacted it.
    public var sealed: [UInt8]?
    /// The key that sealed it (`PAYLOAD_ENCRYPTION_KEYS`).
    public var keyID: String?
    /// True once the retention job redacted the payload (`PAYLOAD_RETENTION_DAYS`).
    public var redacted = false
    /// The App Store environment the ingress verified.
    public var environment: String
    public var origin: EventOrigin
}

/// Which intake stored an event, with the columns that say what it is.
public enum EventOrigin: Sendable, Hashable {
    case notification(uuid: String, type: String, subtype: String?)
    /// A client upload (`CLIENT`, with its order) or observation (`OBSERVED`); `userID` is the
    /// logged-in user, `payloadHash` the hex SHA-256 of the JWS.
    case submission(kind: String, userID: String, orderNo: String?, payloadHash: String)

    /// The context the ingress sealed the payload under (it must be given again to open it).
    public var sealingContext: String {
        switch self {
        case .notification(let uuid, _, _): uuid
        case .submission(_, _, _, let hash): "submission:" + hash
        }
    }
}

/// Where an event stands in its lifecycle (`inbound_event.process_status`).
public enum EventStatus: String, Sendable, StoredStatus {
    /// Stored and published (or about to be); no worker holds it.
    case received = "RECEIVED"
    /// Leased by a worker until `lease_expires_at`.
    case processing = "PROCESSING"
    /// Failed retryably; claimable again from `next_retry_at`.
    case retryWait = "RETRY_WAIT"
    case succeeded = "SUCCEEDED"
    /// Refused for good, or out of attempts; `subsctl replay` puts it back.
    case dead = "DEAD"

    /// The value as an SQL literal, for predicates the partial indexes must match (a bound value
    /// would not let a generic plan use them). Constants only, never input.
    public var literal: StaticString {
        switch self {
        case .received: "'RECEIVED'"
        case .processing: "'PROCESSING'"
        case .retryWait: "'RETRY_WAIT'"
        case .succeeded: "'SUCCEEDED'"
        case .dead: "'DEAD'"
        }
    }

    /// Final: no worker will touch the event again unless an operator replays it.
    public var isFinal: Bool { self == .succeeded || self == .dead }
}
