import Foundation

/// What kind of stored fact a message refers to; the row itself lives in PostgreSQL.
public struct EventKind: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// An App Store Server Notification V2 (`apple_notification_event`).
    public static let notification = EventKind(rawValue: "notification")
    /// A signed transaction uploaded or observed by a client (`transaction_submission`).
    public static let submission = EventKind(rawValue: "submission")

    public var description: String { rawValue }
}

/// The Kafka message of the event topic: a reference to a stored event, never its payload.
///
/// PostgreSQL is the source of truth; the message only tells a worker which row to claim, so a
/// lost, duplicated or reordered message can never change what gets applied.
public struct EventEnvelope: Codable, Hashable, Sendable {
    public var kind: EventKind
    public var eventID: Int64
    public var traceID: String?

    public init(kind: EventKind, eventID: Int64, traceID: String?) {
        self.kind = kind
        self.eventID = eventID
        self.traceID = traceID
    }

    /// Header carrying the trace id, so a message can be followed across services.
    public static let traceHeader = "trace-id"

    enum CodingKeys: String, CodingKey {
        case kind
        case eventID = "eventId"
        case traceID = "traceId"
    }

    public func encoded() -> [UInt8] { Array(try! JSONEncoder().encode(self)) }

    /// Decodes a message value; nil for anything that is not an envelope of this schema.
    public static func decode(_ bytes: [UInt8]) -> EventEnvelope? {
        try? JSONDecoder().decode(EventEnvelope.self, from: Data(bytes))
    }
}
