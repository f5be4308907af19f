import AppStore
import AppStoreTestSupport
import Foundation
import TestSupport
import Testing

/// The Apple endpoints of the running ingress, against a test signer it trusts: what needs the
/// process (publishing to the broker, the server's body limit); the rest is in IngressAppTests.
@Suite(.timeLimit(.minutes(3)))
struct NotificationEndpointTests {
    let sandboxPath = "/api/v1/iap/apple/notifications/sandbox"
    let productionPath = "/api/v1/iap/apple/notifications/production"

    func notification(
        _ harness: IngressHarness, type: NotificationTypeV2 = .didRenew, bundleId: String = IngressHarness.bundleID,
        environment: AppStoreEnvironment = .sandbox
    ) throws -> (String, String) {
        let transaction = TestPayloads.transaction(bundleId: bundleId, environment: environment)
        let uuid = UUID()
        let jws = try harness.signer.signNotification(
            type: type, bundleId: bundleId, environment: environment, transaction: transaction, notificationUUID: uuid)
        return (jws, uuid.uuidString.lowercased())
    }

    @Test func storesOnceAnswers200AndPublishes() async throws {
        try await IngressHarness.with { harness in
            let (jws, uuid) = try notification(harness)
            let first = try await harness.client.post(sandboxPath, json: ["signedPayload": jws])
            #expect(first.status == 200, "\(first.text)")
            #expect(try first.json()["status"] as? String == "accepted")
            let again = try await harness.client.post(sandboxPath, json: ["signedPayload": jws])
            #expect(again.status == 200)
            #expect(try again.json()["status"] as? String == "duplicate")
            #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND notification_uuid = '\(uuid)'") == 1)
            // Sealed at rest: the stored bytes are not the JWS.
            let plain = try await harness.count(
                "SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND position(convert_to('eyJ', 'UTF8') in signed_payload) > 0")
            #expect(plain == 0)
            #expect(
                try await harness.count(
                    "SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND payload_key_id = 'k1' AND original_transaction_id IS NOT NULL"
                ) == 1)
            let published = try await eventually(timeout: 20) { try await harness.count("SELECT count(*) FROM event_outbox") == 0 }
            #expect(published, "the outbox row was not published")
        }
    }

    /// The body limit is the server's: refused from Content-Length, before any body byte is read.
    @Test func refusesOversizedBodies() async throws {
        try await IngressHarness.with { harness in
            let huge = try await harness.client.post(sandboxPath, json: ["signedPayload": String(repeating: "a", count: 300_000)])
            #expect(huge.status == 413)
            #expect(harness.leakedSecrets().isEmpty, "the ingress log leaks \(harness.leakedSecrets())")
        }
    }
}
