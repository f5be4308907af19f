import AppStore
import DemoSigner
import Foundation
import Pipeline
import Postgres
import Storage
import TestSupport
import Testing
import Webhooks

/// Forwarding of Apple's notifications through the real ingress and worker processes to a local
/// receiver: each verified notification arrives with the request body Apple sent, byte for byte
/// (whitespace and extra members included);
/// Sandbox's go to `APPLE_NOTIFICATION_FORWARD_SANDBOX_URL` and Production's to
/// `APPLE_NOTIFICATION_FORWARD_URL`; a receiver answering 500 is retried, then the forward is
/// DEAD (counted, and listed by `subsctl webhooks deliveries`); an unverified request is never
/// forwarded.
@Suite(.serialized) struct AppleForwardTests {
    @Test func forwardsVerifiedNotificationsToTheirEnvironmentsTargetRetriesAndGivesUp() async throws {
        let receiver = try await WebhookDeliveryTests.Receiver.start()
        defer { receiver.process.kill() }
        let base = "http://127.0.0.1:\(receiver.port)"
        let harness = try await WorkerHarness.start(
            environment: .production,
            extra: [
                "WEBHOOK_DELIVERY_ENABLED": "true", "WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
                "WEBHOOK_RETRY_BASE_MS": "20", "WEBHOOK_RETRY_MAX_MS": "100", "WEBHOOK_MAX_ATTEMPTS": "3",
                "WEBHOOK_CONCURRENCY": "4",
                // Production's target always fails; Sandbox's fails once, then takes it.
                "APPLE_NOTIFICATION_FORWARD_URL": base + "/fail", "APPLE_NOTIFICATION_FORWARD_SANDBOX_URL": base + "/flaky/1",
                "APPLE_NOTIFICATION_FORWARD_CONSUMER_GROUP": TestEnvironment.uniqueName("forward"),
            ])
        defer { harness.stop() }
        let store = WebhookStore(pool: harness.pool)
        let path = "/api/v1/iap/apple/notifications/sandbox"

        // Sandbox: posted as raw bytes, so the comparison is with exactly what was sent; not the
        // compact form (other whitespace, an extra member), so the ingress keeps it for the forward.
        let sandboxUUID = UUID()
        let jws = try harness.signer.signNotification(
            type: .test, bundleId: IngressHarness.bundleID, environment: .sandbox, notificationUUID: sandboxUUID)
        let body = "{\n  \"signedPayload\" : \"" + jws + "\",\n  \"extra\": [1, 2.50]\n}\n"
        let posted = try await harness.client.request(
            "POST", path, headers: ["Content-Type": "application/json"], body: Data(body.utf8))
        #expect(posted.status == 200, "\(posted.text)")
        let sandboxID = sandboxUUID.uuidString.lowercased()
        let productionID = try await harness.notify(.test, environment: .production)

        // Not signed by Apple's chain: refused, so never stored, so never forwarded.
        let strangerUUID = UUID()
        let stranger = try TestAppleSigner()
        let refused = try await harness.client.post(
            path,
            json: [
                "signedPayload": try stranger.signNotification(
                    type: .test, bundleId: IngressHarness.bundleID, environment: .sandbox, notificationUUID: strangerUUID)
            ])
        #expect(refused.status != 200)

        // Generous: the end-to-end phase runs its suites side by side on two cores.
        let sandbox = try await store.wait(WebhookConfiguration.forwardSandboxEndpointID, sandboxID, for: .delivered, timeout: 120)
        #expect(sandbox?.status == .delivered)
        #expect(sandbox?.attempts == 2)
        let production = try await store.wait(WebhookConfiguration.forwardEndpointID, productionID, for: .dead, timeout: 120)
        #expect(production?.status == .dead)
        #expect(production?.attempts == 3)
        #expect(production?.lastStatusCode == 500)

        // Each environment's notification reached its own target only, with the body as sent.
        let sandboxRequests = receiver.requests(path: "/flaky/1")
        #expect(sandboxRequests.map { $0["id"] as? String } == [sandboxID, sandboxID])
        for request in sandboxRequests { #expect(request["body"] as? String == body) }
        #expect(receiver.requests(path: "/fail").map { $0["id"] as? String } == [productionID, productionID, productionID])
        #expect(receiver.requests.count == 5)
        // The refused one: nothing stored, nothing to forward.
        let strangerID = strangerUUID.uuidString.lowercased()
        #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE notification_uuid = \(strangerID)") == 0)
        #expect(try await store.delivery(WebhookConfiguration.forwardSandboxEndpointID, strangerID) == nil)
        #expect(try await store.delivery(WebhookConfiguration.forwardEndpointID, strangerID) == nil)
        // Forwards are not webhooks: the webhooks' list leaves them out.
        #expect(try await store.endpoints().isEmpty)

        // What operators see: the counters, and the DEAD forward in the delivery list.
        #expect(try await harness.metric(#"subs_apple_forward_deliveries_total{outcome="dead"}"#, reaching: 1) == 1)
        #expect(try await harness.metric(#"subs_apple_forward_deliveries_total{outcome="delivered"}"#, reaching: 1) == 1)
        #expect(try await harness.metric(#"subs_webhook_deliveries_total{outcome="dead"}"#) == 0)
        let listed = try await harness.subsctl(["webhooks", "deliveries", WebhookConfiguration.forwardEndpointID, "--status", "DEAD"])
        #expect(listed.status == 0)
        #expect(listed.output.contains(productionID), "\(listed.output)")
    }
}
