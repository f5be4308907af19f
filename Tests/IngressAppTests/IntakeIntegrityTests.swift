import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import ServiceRuntime
import Storage
import TestSupport
import Testing

@testable import IngressApp

/// What one notification or upload can do to the others: a row the database refuses fails alone,
/// a reused UUID keeps the first notification and is recorded, and a re-encoded signature is the
/// same signed content.
@Suite(.timeLimit(.minutes(3)))
struct IntakeIntegrityTests {
    let sandboxPath = "/api/v1/iap/apple/notifications/sandbox"

    func payload(uuid: String, type: String = "DID_RENEW") -> ResponseBodyV2DecodedPayload {
        var payload = ResponseBodyV2DecodedPayload()
        payload.rawNotificationType = type
        payload.notificationUUID = uuid
        payload.signedDate = TestPayloads.wholeMilliseconds(Date())
        var data = NotificationData()
        data.bundleId = IngressTestApp.bundleID
        data.environment = .sandbox
        payload.data = data
        return payload
    }

    /// The same ES256 signature as (r, n−s): it verifies just as well.
    static func malleated(_ jws: String) -> String {
        var parts = jws.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let signature = Base64URL.decode(Substring(parts[2]))!
        // The order of P-256's base point.
        let hex = Array("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551")
        let order = stride(from: 0, to: hex.count, by: 2).map { UInt8(String(hex[$0...$0 + 1]), radix: 16)! }
        var s = Array(signature[32...])
        var borrow = 0
        for i in (0..<32).reversed() {
            let difference = Int(order[i]) - Int(s[i]) - borrow
            s[i] = UInt8((difference + 256) % 256)
            borrow = difference < 0 ? 1 : 0
        }
        parts[2] = Base64URL.encode(Array(signature[..<32]) + s)
        return parts.joined(separator: ".")
    }

    @Test func aNotificationWithANulInItsUUIDIs400AndTheOthersAreStored() async throws {
        try await IngressTestApp.with { harness in
            let bad = try harness.signer.sign(payload(uuid: "bad\u{0}uuid"))
            let good = try (0..<30).map { _ in try harness.signer.sign(payload(uuid: UUID().uuidString.lowercased())) }
            let statuses = try await withThrowingTaskGroup(of: (Bool, Int, String?).self) { group in
                for jws in good + [bad] {
                    group.addTask {
                        let response = try await harness.post(sandboxPath, json: ["signedPayload": jws])
                        return (jws == bad, response.status, response.code)
                    }
                }
                return try await group.reduce(into: [(Bool, Int, String?)]()) { $0.append($1) }
            }
            for (isBad, status, code) in statuses {
                if isBad {
                    #expect(status == 400)
                    #expect(code == "INVALID_REQUEST")
                } else {
                    #expect(status == 200, "\(String(describing: code))")
                }
            }
            #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'notification'") == 30)
        }
    }

    @Test func aRowTheDatabaseRefusesFailsAloneInItsBatch() async throws {
        try await IngressTestApp.with { harness in
            let store = EventStore(pool: harness.pool, topic: "t")
            // One batch at a time: the first commits alone while the others queue into the next.
            let intake = NotificationIntake(store: store, publisher: OutboxOnly(), maxBatchSize: 64, maxConcurrentBatches: 1)
            func event(_ uuid: String, signedDate: Date = Date()) -> NewNotificationEvent {
                NewNotificationEvent(
                    notificationUUID: uuid, notificationType: "DID_RENEW", environment: "Sandbox", signedDate: signedDate,
                    routingKey: uuid)
            }
            // Before PostgreSQL's first timestamp (4713 BC): SQLSTATE 22008, refused by the database itself.
            let outOfRange = event("out-of-range", signedDate: Date(timeIntervalSince1970: -3e11))
            let events = (0..<20).map { event("ok-\($0)") } + [outOfRange]
            let outcomes = await withTaskGroup(of: (String, Bool).self) { group in
                for event in events {
                    group.addTask { (event.notificationUUID, (try? await intake.accept(event)) != nil) }
                }
                return await group.reduce(into: [String: Bool]()) { $0[$1.0] = $1.1 }
            }
            #expect(outcomes["out-of-range"] == false)
            #expect(outcomes.filter { $0.key != "out-of-range" }.values.allSatisfy { $0 }, "\(outcomes)")
            let stored = try await harness.count("SELECT count(*) FROM inbound_event WHERE notification_uuid LIKE 'ok-%'")
            #expect(stored == 20)
        }
    }

    @Test func aReusedUUIDKeepsTheFirstNotificationAndRecordsTheConflict() async throws {
        try await IngressTestApp.with { harness in
            let uuid = UUID().uuidString.lowercased()
            let first = try harness.signer.sign(payload(uuid: uuid, type: "DID_RENEW"))
            let other = try harness.signer.sign(payload(uuid: uuid, type: "REFUND"))
            let conflictsBefore = Self.conflictCount()
            #expect(try await harness.post(sandboxPath, json: ["signedPayload": first]).status == 200)
            // A re-delivery, and the same content under a re-encoded signature: plain duplicates.
            for again in [first, Self.malleated(first)] {
                let response = try await harness.post(sandboxPath, json: ["signedPayload": again])
                #expect(response.status == 200, "\(response.text)")
                #expect(try response.json()["status"] as? String == "duplicate")
            }
            #expect(try await harness.count("SELECT count(*) FROM notification_uuid_conflict") == 0)
            for _ in 0..<2 {
                let response = try await harness.post(sandboxPath, json: ["signedPayload": other])
                #expect(response.status == 200, "\(response.text)")
                #expect(try response.json()["status"] as? String == "duplicate")
            }
            #expect(
                try await harness.count(
                    "SELECT count(*) FROM inbound_event WHERE notification_uuid = '\(uuid)' AND notification_type = 'DID_RENEW'") == 1)
            #expect(
                try await harness.count(
                    """
                    SELECT count(*) FROM notification_uuid_conflict c JOIN inbound_event e ON e.id = c.event_id
                     WHERE c.notification_uuid = '\(uuid)' AND c.notification_type = 'REFUND'
                       AND c.stored_payload_hash = e.payload_hash AND c.received_payload_hash <> e.payload_hash
                    """) == 1)
            #expect(Self.conflictCount() - conflictsBefore >= 2)
        }
    }

    static func conflictCount() -> Double {
        MetricsRegistry.shared.prometheusText().split(separator: "\n")
            .first { $0.hasPrefix("subs_notification_uuid_conflicts_total ") }
            .flatMap { Double($0.split(separator: " ").last!) } ?? 0
    }

    @Test func aSubmissionWithAReEncodedSignatureIsTheSameSubmission() async throws {
        try await IngressTestApp.with(extra: ["INGRESS_FULFILLMENT_WAIT_MS": "0"]) { harness in
            try await harness.rows.seedTwoPlanCatalogue()
            let order = try await harness.createOrder("carol").json()
            let orderNo = try #require(order["orderNo"] as? String)
            let token = UUID(uuidString: try #require(order["appAccountToken"] as? String))
            let jws = try harness.signer.sign(
                TestPayloads.transaction(
                    bundleId: IngressTestApp.bundleID, environment: .sandbox, productId: IngressTestApp.monthly,
                    appAccountToken: token))
            let path = "/api/v1/subscriptions/orders/\(orderNo)/apple-transaction"
            for variant in [jws, Self.malleated(jws)] {
                let response = try await harness.post(path, json: ["signedTransaction": variant], headers: harness.authorized("carol"))
                #expect(response.status == 202, "\(response.text)")
            }
            #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'submission'") == 1)
        }
    }
}
