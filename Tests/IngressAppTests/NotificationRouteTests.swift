import AppStore
import AppStoreTestSupport
import Foundation
import TestSupport
import Testing

/// The Apple endpoints of the ingress router (behind the admission check on their heads), against
/// a test signer it trusts.
@Suite(.timeLimit(.minutes(3)))
struct NotificationRouteTests {
    let sandboxPath = "/api/v1/iap/apple/notifications/sandbox"
    let productionPath = "/api/v1/iap/apple/notifications/production"

    func notification(
        _ harness: IngressTestApp, type: NotificationTypeV2 = .didRenew, bundleId: String = IngressTestApp.bundleID,
        environment: AppStoreEnvironment = .sandbox
    ) throws -> (String, String) {
        let transaction = TestPayloads.transaction(bundleId: bundleId, environment: environment)
        let uuid = UUID()
        let jws = try harness.signer.signNotification(
            type: type, bundleId: bundleId, environment: environment, transaction: transaction, notificationUUID: uuid)
        return (jws, uuid.uuidString.lowercased())
    }

    @Test func storesOnceSealedAndLeavesTheEventInTheOutbox() async throws {
        try await IngressTestApp.with { harness in
            let (jws, uuid) = try notification(harness)
            let first = try await harness.post(sandboxPath, json: ["signedPayload": jws])
            #expect(first.status == 200, "\(first.text)")
            #expect(try first.json()["status"] as? String == "accepted")
            let again = try await harness.post(sandboxPath, json: ["signedPayload": jws])
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
            // No broker here: the committed event waits in the outbox for the relay.
            #expect(try await harness.count("SELECT count(*) FROM event_outbox") == 1)
        }
    }

    @Test func unknownTypesAreStoredAndAcknowledged() async throws {
        try await IngressTestApp.with { harness in
            var payload = ResponseBodyV2DecodedPayload()
            payload.rawNotificationType = "SOMETHING_APPLE_ADDS_NEXT_YEAR"
            payload.notificationUUID = UUID().uuidString.lowercased()
            payload.signedDate = TestPayloads.wholeMilliseconds(Date())
            var data = NotificationData()
            data.bundleId = IngressTestApp.bundleID
            data.environment = .sandbox
            payload.data = data
            let response = try await harness.post(sandboxPath, json: ["signedPayload": try harness.signer.sign(payload)])
            #expect(response.status == 200, "\(response.text)")
            #expect(
                try await harness.count(
                    "SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND notification_type = 'SOMETHING_APPLE_ADDS_NEXT_YEAR'") == 1)
        }
    }

    @Test func refusesWhatIsNotGenuineOrNotOurs() async throws {
        try await IngressTestApp.with { harness in
            func post(_ path: String, _ body: Any) async throws -> (Int, String?) {
                let response = try await harness.post(path, json: body)
                return (response.status, try? response.json()["code"] as? String)
            }
            let (jws, _) = try notification(harness)
            #expect(try await post(productionPath, ["signedPayload": jws]) == (400, "INVALID_ENVIRONMENT"))
            var tampered = Array(jws)
            tampered[tampered.count - 5] = tampered[tampered.count - 5] == "A" ? "B" : "A"
            #expect(try await post(sandboxPath, ["signedPayload": String(tampered)]) == (401, "INVALID_SIGNATURE"))
            let (otherApp, _) = try notification(harness, bundleId: "com.someone.else")
            #expect(try await post(sandboxPath, ["signedPayload": otherApp]) == (403, "INVALID_APP"))
            let stranger = try TestAppleSigner()
            let strangerJWS = try stranger.signNotification(type: .test, bundleId: IngressTestApp.bundleID, environment: .sandbox)
            #expect(try await post(sandboxPath, ["signedPayload": strangerJWS]) == (401, "INVALID_CHAIN"))
            #expect(try await post(sandboxPath, ["signedPayload": "not.a.jws"]) == (400, "MALFORMED"))
            #expect(try await post(sandboxPath, ["payload": jws]) == (400, "INVALID_REQUEST"))
            #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'notification'") == 0)

            let text = await harness.request(
                "POST", sandboxPath, headers: ["Content-Type": "text/plain"], body: Array(jws.utf8))
            #expect(text.status == 415)
            #expect(try text.json()["code"] as? String == "UNSUPPORTED_MEDIA_TYPE")
            let refused = await harness.getInternal("/metrics")
            #expect(refused.text.contains("subs_notifications_refused_total{reason=\"invalid_signature\"}"))
            #expect(harness.leakedSecrets().isEmpty, "the ingress log leaks \(harness.leakedSecrets())")
        }
    }

    @Test func limitsEachSourcesRate() async throws {
        try await IngressTestApp.with(extra: [
            "INGRESS_NOTIFICATION_RATE_PER_SECOND": "1", "INGRESS_NOTIFICATION_RATE_BURST": "3",
        ]) { harness in
            // Twenty at once from one source: far beyond a burst of 3, whatever the machine's speed.
            let bodies = try (0..<20).map { _ in try notification(harness).0 }
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for body in bodies {
                    group.addTask { try await harness.post(sandboxPath, json: ["signedPayload": body]).status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 200 }.count >= 3, "\(statuses)")
            #expect(statuses.filter { $0 == 429 }.count >= 10, "\(statuses)")
            #expect(Set(statuses).isSubset(of: [200, 429]), "\(statuses)")
        }
    }
}
