import Events
import Foundation
import Testing

/// The outbox's message value (here because Events has no test target of its own and the outbox
/// tests live in this one).
@Suite("Event envelope")
struct EventEnvelopeTests {
    @Test func envelopeWrittenDirectlyIsTheDocumentJSONEncoderWrites() throws {
        let envelopes = [
            EventEnvelope(kind: .notification, eventID: 42, traceID: "abc-DEF_123"),
            EventEnvelope(kind: .submission, eventID: -1, traceID: nil),
            EventEnvelope(kind: .notification, eventID: .max, traceID: "a/b:c"),
            EventEnvelope(kind: .notification, eventID: 7, traceID: "quote\" back\\ é\n"),
        ]
        for envelope in envelopes {
            #expect(EventEnvelope.decode(envelope.encoded()) == envelope)
            let direct = try JSONSerialization.jsonObject(with: Data(envelope.encoded())) as? NSDictionary
            let reference = try JSONSerialization.jsonObject(with: JSONEncoder().encode(envelope)) as? NSDictionary
            #expect(direct != nil && direct == reference)
        }
    }
}
