import AppStore
import AppStoreTestSupport
import Crypto
import Domain
import Foundation
import Postgres
import Storage
import TestSupport
import Testing

/// The support console in a real browser: Tests/Browser/console_browser_test.py drives Debian's
/// headless Chromium through Selenium (both installed by deploy/local/install.sh) against a live
/// ingress over plain http (so without `Secure` cookies); screenshots stay in the local state
/// folder's browser-screenshots (`SUBS_STATE_DIR`, else .local) for a person to look at.
@Suite(.timeLimit(.minutes(5)))
struct ConsoleBrowserTests {
    @Test func signInSearchReplayAndSignOutInChromium() async throws {
        let root = ServiceProcess.packageRoot
        let state = ServiceProcess.localState
        let python = state.appendingPathComponent("venv/bin/python")
        let script = root.appendingPathComponent("Tests/Browser/console_browser_test.py")
        for needed in [python.path, "/usr/bin/chromium", "/usr/bin/chromedriver"] where !FileManager.default.isExecutableFile(atPath: needed) {
            throw MissingServiceError(variable: "\(needed) (deploy/local/install.sh installs chromium, chromium-driver and selenium)")
        }
        let token = Base64URL.encode(SecureRandom.bytes(32))
        let admin = ["ADMIN_TOKENS": "browser-operator:operator:\(token)", "ADMIN_HTTP_PORT": "0", "ADMIN_COOKIE_INSECURE": "true"]
        try await IngressHarness.with(extra: admin) { harness in
            var adminPort: Int?
            _ = await eventually(timeout: 30, every: .milliseconds(100)) {
                let log = harness.process.output
                guard let range = log.range(of: #""admin.port":(\d+)"#, options: .regularExpression) else { return false }
                adminPort = Int(log[range].dropFirst("\"admin.port\":".count))
                return true
            }
            let port = try #require(adminPort, "the admin port in the ingress log")
            // A renewal whose product is unknown: DEAD with UNMATCHED_PRODUCT, as a worker leaves it.
            let transactionID = String(UInt64.random(in: 2_000_000_000...2_999_999_999))
            let transaction = TestPayloads.transaction(
                bundleId: IngressHarness.bundleID, environment: .sandbox, transactionId: transactionID,
                originalTransactionId: transactionID)
            let uuid = UUID()
            let jws = try harness.signer.signNotification(
                type: .didRenew, bundleId: IngressHarness.bundleID, environment: .sandbox, transaction: transaction,
                notificationUUID: uuid)
            let posted = try await harness.client.post("/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": jws])
            #expect(posted.status == 200)
            let eventID: Int64 = try await harness.pool.query(
                """
                UPDATE inbound_event SET process_status = 'DEAD', error_code = 'UNMATCHED_PRODUCT', error_message = 'no such product'
                 WHERE notification_uuid = \(uuid.uuidString.lowercased()) RETURNING id
                """
            ).first!.decode("id")

            // A subscriber whose case opens with their access in words.
            let rows = TestRows(pool: harness.pool, bundleID: IngressHarness.bundleID)
            try await rows.applyDemoCatalogue()
            try await rows.addSubscription(
                user: "browser-user", product: "com.example.pro.yearly", status: "ACTIVE", expiresAt: Date() + 30 * 86_400)
            // An endpoint whose delivery of an event about the subscriber was given up on. Nothing
            // sends to it here, so its secret is random bytes rather than a sealed secret.
            let webhookID = "wh_browser\(UInt32.random(in: 1...UInt32.max))"
            try await WebhookStore(pool: harness.pool).create(
                WebhookStore.Endpoint(
                    id: webhookID, url: "https://93.184.216.34/hooks", eventTypes: nil, environments: nil, description: "browser test",
                    secret: WebhookStore.SealedSecret(keyID: "unused", sealed: SecureRandom.bytes(48))),
                operator: "browser-test")
            let deadEvent = try await rows.addDeadDelivery(
                user: "browser-user", data: ["entitlement": .string("pro")], error: "the endpoint answered 500")

            let screenshots = state.appendingPathComponent("browser-screenshots").path
            let run = try ServiceProcess(
                executablePath: python.path, name: "console-browser", arguments: [script.path],
                environment: [
                    "CONSOLE_URL": "http://127.0.0.1:\(port)", "ADMIN_TOKEN": token, "TRANSACTION_ID": transactionID, "USER_ID": "browser-user",
                    "WEBHOOK_ID": webhookID, "DEAD_EVENT_ID": deadEvent,
                    "SCREENSHOT_DIR": screenshots, "HOME": FileManager.default.temporaryDirectory.path, "PATH": "/usr/bin:/bin",
                ])
            let finished = await eventually(timeout: 180, every: .milliseconds(500)) { !run.isRunning }
            #expect(finished, "the browser test did not finish")
            let status = await run.terminate()
            #expect(status == 0, "the browser test failed:\n\(run.output.suffix(4000))")
            let state: String = try await harness.pool.query(
                "SELECT process_status FROM inbound_event WHERE id = \(eventID)"
            ).first!.decode("process_status")
            #expect(state == "RECEIVED", "the replay reached the database")
            let audited = try await harness.count(
                "SELECT count(*) FROM audit_log WHERE action = 'DEAD_EVENT_REPLAYED' AND operator = 'browser-operator' AND reason = 'product added (browser test)'"
            )
            #expect(audited == 1)
            let grants = try await harness.count(
                """
                SELECT count(*) FROM audit_log WHERE action IN ('ENTITLEMENT_GRANTED', 'ENTITLEMENT_REVOKED')
                   AND operator = 'browser-operator' AND after::text LIKE '%browser-user%'
                """)
            #expect(grants == 2, "the grant and its revocation are audited")
            let delivery: String = try await harness.pool.query(
                "SELECT status FROM webhook_delivery WHERE event_id = \(deadEvent) AND endpoint_id = \(webhookID)"
            ).first!.decode("status")
            #expect(delivery == "PENDING", "the retry reached the database")
            let webhookActions = try await harness.pool.query(
                "SELECT action FROM audit_log WHERE action LIKE 'webhook.%' AND operator = 'browser-operator' ORDER BY id"
            ).map { try $0.decode("action", as: String.self) }
            #expect(webhookActions == ["webhook.retry", "webhook.create", "webhook.rotate-secret", "webhook.delete"])
            #expect(try await harness.count("SELECT count(*) FROM console_session") == 0, "the sign-out closed the session")
            #expect(FileManager.default.fileExists(atPath: screenshots + "/03-case.png"))
            #expect(!harness.process.output.contains(token), "the ingress log leaks the admin token")
        }
    }
}
