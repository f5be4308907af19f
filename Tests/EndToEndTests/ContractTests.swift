import AppStoreTestSupport
import Crypto
import Foundation
import TestSupport
import Testing

/// The OpenAPI document against the live ingress, by schemathesis (from the local venv): no 5xx,
/// and every response conforms to the document (status, content type, schema).
@Suite(.timeLimit(.minutes(5)))
struct ContractTests {
    @Test func liveIngressConformsToItsOpenAPIDocument() async throws {
        let schemathesis = ServiceProcess.localState.appendingPathComponent("venv/bin/schemathesis")
        guard FileManager.default.isExecutableFile(atPath: schemathesis.path) else {
            throw MissingServiceError(variable: "schemathesis in .local/venv (deploy/local/install.sh installs it)")
        }
        // The offer signature route signs with an App Store key made for this run.
        let appStoreKey = FileManager.default.temporaryDirectory.appendingPathComponent("contract-\(UUID().uuidString).p8")
        try Data(P256PrivateKey.generate().pemPKCS8().utf8).write(to: appStoreKey)
        defer { try? FileManager.default.removeItem(at: appStoreKey) }
        try await IngressHarness.with(extra: [
            "INGRESS_NOTIFICATION_RATE_PER_SECOND": "100000", "INGRESS_NOTIFICATION_RATE_BURST": "100000",
            "INGRESS_FULFILLMENT_WAIT_MS": "100",
            "APPLE_IAP_ISSUER_ID": "contract-issuer", "APPLE_IAP_KEY_ID": "CONTRACT01", "APPLE_IAP_PRIVATE_KEY_PATH": appStoreKey.path,
        ]) { harness in
            try await harness.rows.seedTwoPlanCatalogue()
            let base = harness.client.baseURL.absoluteString
            let run = try ServiceProcess(
                executablePath: schemathesis.path, name: "schemathesis",
                arguments: [
                    "run", "\(base)/openapi.json", "--url", base,
                    "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
                    "--max-examples", "10", "--seed", "20261129", "--workers", "1", "--max-time", "60",
                    "--header", "Authorization: Bearer \(harness.userToken("contract-user"))",
                    "--no-color", "--output-sanitize", "true", "--generation-database", "none",
                ],
                environment: ["HOME": FileManager.default.temporaryDirectory.path])
            let finished = await eventually(timeout: 240, every: .milliseconds(500)) { !run.isRunning }
            #expect(finished, "schemathesis did not finish")
            let status = await run.terminate()
            #expect(status == 0, "schemathesis found problems:\n\(run.output.suffix(6000))")
            #expect(harness.leakedSecrets().isEmpty, "the ingress log leaks \(harness.leakedSecrets())")
        }
    }

    @Test func liveAdminAPIConformsToItsOpenAPIDocument() async throws {
        let schemathesis = ServiceProcess.localState.appendingPathComponent("venv/bin/schemathesis")
        guard FileManager.default.isExecutableFile(atPath: schemathesis.path) else {
            throw MissingServiceError(variable: "schemathesis in .local/venv (deploy/local/install.sh installs it)")
        }
        let token = Base64URL.encode(SecureRandom.bytes(32))
        // The Apple actions call the App Store mock, so what schemathesis sends reaches them.
        let key = P256PrivateKey.generate()
        let keyPath = FileManager.default.temporaryDirectory.appendingPathComponent("api-key-\(UUID().uuidString).p8")
        try Data(key.pemPKCS8().utf8).write(to: keyPath)
        defer { try? FileManager.default.removeItem(at: keyPath) }
        let mock = MockAppStoreServerAPI(
            signer: try TestAppleSigner(),
            credentials: .init(issuerId: "issuer-contract", keyId: "KEYCON01", bundleId: IngressHarness.bundleID, publicKey: key.publicKey))
        let mockURL = try mock.start()
        defer { Task { await mock.shutdown() } }
        let extra = [
            "ADMIN_TOKENS": "contract:operator:\(token)", "ADMIN_HTTP_PORT": "0", "APPLE_IAP_ISSUER_ID": "issuer-contract",
            "APPLE_IAP_KEY_ID": "KEYCON01", "APPLE_IAP_PRIVATE_KEY_PATH": keyPath.path, "APPLE_IAP_API_BASE_URL_SANDBOX": mockURL.absoluteString,
        ]
        try await IngressHarness.with(extra: extra) { harness in
            try await harness.rows.seedTwoPlanCatalogue()
            var adminPort: Int?
            _ = await eventually(timeout: 30, every: .milliseconds(100)) {
                let log = harness.process.output
                guard let range = log.range(of: #""admin.port":(\d+)"#, options: .regularExpression) else { return false }
                adminPort = Int(log[range].dropFirst("\"admin.port\":".count))
                return true
            }
            let port = try #require(adminPort, "the admin port in the ingress log")
            let base = "http://127.0.0.1:\(port)"
            let run = try ServiceProcess(
                executablePath: schemathesis.path, name: "schemathesis-admin",
                arguments: [
                    "run", "\(base)/admin/openapi.json", "--url", base,
                    "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
                    "--max-examples", "10", "--seed", "20261202", "--workers", "1", "--max-time", "60",
                    "--header", "Authorization: Bearer \(token)",
                    "--no-color", "--output-sanitize", "true", "--generation-database", "none",
                ],
                environment: ["HOME": FileManager.default.temporaryDirectory.path])
            let finished = await eventually(timeout: 240, every: .milliseconds(500)) { !run.isRunning }
            #expect(finished, "schemathesis did not finish")
            let status = await run.terminate()
            #expect(status == 0, "schemathesis found problems:\n\(run.output.suffix(6000))")
            #expect(harness.leakedSecrets().isEmpty, "the ingress log leaks \(harness.leakedSecrets())")
            #expect(!harness.process.output.contains(token), "the ingress log leaks the admin token")
        }
    }
}
