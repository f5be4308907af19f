import Foundation

/// What kind of stored fact a message refers to; the row itself lives in PostgreSQL.
public struct EventKind: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// An App Store Server Notification V2 (an `inbound_event` row of this kind).
    public static let notification = EventKind(rawValue: "notification")
    /// A signed transaction uploaded or observed by a client (an `inbound_event` row of this kind).
    public static let submission = EventKind(rawValue: "submission")

    public var description: String { rawValue }
}

/// How a worker tells the ingress that a stored event is done: a PostgreSQL NOTIFY on `channel`
/// whose payload is the event's `key` (`<kind>:<id>`). Both services use this one definition.
public enum EventCompletion {
    /// The NOTIFY channel the ingress listens on.
    public static let channel = "fulfillment_events"

    /// `<kind>:<id>`, the payload naming one event.
    public static func key(kind: EventKind, id: Int64) -> String { "\(kind.rawValue):\(id)" }
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

    /// The message value. Written directly when no member needs escaping (trace ids and kinds are
    /// plain identifiers): a JSONEncoder per message was ~6% of a notification's ingress CPU.
    /// It decodes to the same envelope as JSONEncoder's (traceId left out when nil).
    public func encoded() -> [UInt8] {
        guard Self.needsNoEscaping(kind.rawValue), traceID.map(Self.needsNoEscaping) ?? true else {
            // A struct of strings and an integer always encodes.
            return Array(try! JSONEncoder().encode(self))
        }
        var out: [UInt8] = []
        out.reserveCapacity(48 + kind.rawValue.utf8.count + (traceID?.utf8.count ?? 0))
        out += #"{"kind":""#.utf8
        out += kind.rawValue.utf8
        out += #"","eventId":"#.utf8
        out += String(eventID).utf8
        if let traceID {
            out += #","traceId":""#.utf8
            out += traceID.utf8
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// Printable ASCII other than the quote and the backslash: copied into a JSON string as is.
    private static func needsNoEscaping(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
    }

    /// Decodes a message value; nil for anything that is not an envelope of this schema.
    public static func decode(_ bytes: [UInt8]) -> EventEnvelope? {
        try? JSONDecoder().decode(EventEnvelope.self, from: Data(bytes))
    }
}
