import AppStoreTestSupport
import Foundation
import TestSupport
import Testing

/// `subsctl demo` (the end of deploy/local/run.sh) against a running ingress and worker: every step
/// applied, with the balances and statuses the story implies.
@Suite(.timeLimit(.minutes(3)))
struct DemoTests {
    @Test func theDemoTellsItsFourStepsAndSucceeds() async throws {
        try await IngressHarness.with { harness in
            try await harness.rows.applyDemoCatalogue()
            let worker = try ServiceProcess(
                executable: "fulfillment", name: "demo-worker",
                environment: harness.environment.merging(["WORKER_ID": "demo-worker"]) { _, new in new })
            defer { worker.kill() }
            let signerDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("demo-signer-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: signerDirectory) }
            try harness.signer.save(to: signerDirectory)

            let demo = try ServiceProcess(
                executable: "subsctl", name: "demo",
                environment: [
                    "USER_TOKEN_HS256_SECRET": harness.userTokenSecret, "APPLE_IAP_BUNDLE_ID": IngressHarness.bundleID,
                    "LOG_LEVEL": "warning",
                ],
                arguments: [
                    "demo", "--ingress", harness.client.baseURL.absoluteString, "--signer-dir", signerDirectory.path,
                    // A step is seen applied within this wait; on the loaded two-core test machine, with the
                    // other end-to-end suites running, one took longer than 10 s (2026-12-05).
                    "--wait-seconds", "45",
                ])
            let status = await demo.waitForExit(timeout: 240)
            let output = demo.output
            #expect(status == 0, "\(output)")
            for step in ["== 1. Purchase", "== 2. Renewal", "== 3. Plan change", "== 4. Refund", "Demo complete"] {
                #expect(output.contains(step), "missing \(step) in:\n\(output)")
            }
            #expect(output.components(separatedBy: "evidence (applied by the worker").count - 1 == 4, "\(output)")
            // The story's outcome as the REST API tells it: 1000, +1000 renewal, +3000 upgrade, the upgrade's 3000 refunded.
            for balance in ["credits       1000 available", "credits       2000 available", "credits       5000 available"] {
                #expect(output.contains(balance), "missing \(balance) in:\n\(output)")
            }
            #expect(output.contains("next renewal com.example.starter.monthly"))
            #expect(output.contains("subscription  REVOKED com.example.pro.monthly"))
            #expect(output.contains("grant for this transaction 3000, 3000 revoked"))
            #expect(output.components(separatedBy: "-> 200 accepted").count - 1 == 5, "five notifications stored: \(output)")
            #expect(!output.contains("eyJ"), "the demo prints no token or JWS")
            let lines = output.split(separator: "\n")
            #expect(lines.suffix(2).first?.hasPrefix("Look the user up:  subsctl lookup demo-") == true, "\(output.suffix(400))")
            #expect(lines.last?.contains("Support console:   http://127.0.0.1:8082/admin/case?q=demo-") == true, "\(output.suffix(400))")
            #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'notification'") == 5)
            #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'submission'") == 1)
            #expect(harness.leakedSecrets().isEmpty, "the ingress log leaks \(harness.leakedSecrets())")
        }
    }

    @Test func anUnreachableIngressFailsAfterItsBoundedWait() async throws {
        let signerDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("demo-signer-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: signerDirectory) }
        try TestAppleSigner().save(to: signerDirectory)
        let demo = try ServiceProcess(
            executable: "subsctl", name: "demo-unreachable",
            environment: ["USER_TOKEN_HS256_SECRET": String(repeating: "s", count: 32)],
            arguments: [
                "demo", "--ingress", "http://127.0.0.1:\(freeTCPPort())", "--signer-dir", signerDirectory.path,
                "--wait-seconds", "1",
            ])
        let status = await demo.waitForExit(timeout: 90)
        #expect(status == 75, "\(demo.output)")
        #expect(demo.output.contains("is not ready"))
    }
}
