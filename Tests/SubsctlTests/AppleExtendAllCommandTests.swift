import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import Postgres
import TestSupport
import Testing

/// `subsctl apple extend-all` in process, against the App Store mock and a real database.
@Suite(.timeLimit(.minutes(3)))
struct AppleExtendAllCommandTests {
    static let bundleId = "com.example.app"

    /// The mock (completing after one status read), a migrated database and the environment that
    /// points subsctl at both.
    static func with(_ body: (MockAppStoreServerAPI, TestDatabase, [String: String]) async throws -> Void) async throws {
        let key = P256PrivateKey.generate()
        let keyPath = FileManager.default.temporaryDirectory.appendingPathComponent("api-key-\(UUID().uuidString).p8")
        try Data(key.pemPKCS8().utf8).write(to: keyPath)
        defer { try? FileManager.default.removeItem(at: keyPath) }
        let mock = MockAppStoreServerAPI(
            signer: try TestAppleSigner(),
            credentials: .init(issuerId: "issuer-cli", keyId: "KEYCLI01", bundleId: bundleId, publicKey: key.publicKey),
            environment: .sandbox, massExtensionPolls: 1)
        let url = try mock.start()
        try await withResource({ mock }, cleanUp: { await $0.shutdown() }) { mock in
            try await withTestDatabase("extendall") { database in
                let environment = [
                    "DATABASE_URL": database.url, "APPLE_IAP_ISSUER_ID": "issuer-cli", "APPLE_IAP_KEY_ID": "KEYCLI01",
                    "APPLE_IAP_PRIVATE_KEY_PATH": keyPath.path, "APPLE_IAP_BUNDLE_ID": bundleId, "APPLE_IAP_ENV": "Sandbox",
                    "APPLE_IAP_API_BASE_URL_SANDBOX": url.absoluteString, "USER": "carol",
                ]
                try await body(mock, database, environment)
            }
        }
    }

    static func auditRows(_ database: TestDatabase) async throws -> [(operator: String, accepted: String?)] {
        try await database.pool.query(
            """
            SELECT operator, after->>'accepted' AS accepted FROM audit_log
             WHERE action = 'RENEWAL_DATES_EXTENDED_FOR_ALL' ORDER BY id
            """
        ).map { (try $0.decode("operator"), try $0.decode("accepted")) }
    }

    @Test func extendsOnceFollowsAppleToCompletionAndASecondRunSendsNothing() async throws {
        try await Self.with { mock, database, environment in
            try mock.addTransaction(
                TestPayloads.transaction(bundleId: Self.bundleId, environment: .sandbox, productId: "com.example.monthly"))
            let arguments = [
                "apple", "extend-all", "--product", "com.example.monthly", "--days", "5", "--reason", "outage 2026-12-07",
                "--poll-seconds", "1", "--json",
            ]
            let first = await SubsctlInProcess.run(arguments, environment: environment)
            #expect(first.status == 0, "\(first.stderr)")
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(first.stdout.utf8)) as? [String: Any], "\(first.stdout)")
            #expect(answer["complete"] as? Bool == true && answer["succeededCount"] as? Int == 1 && answer["sent"] as? Bool == true)
            #expect(answer["extendReasonCode"] as? Int == 3 && answer["extendByDays"] as? Int == 5)
            #expect(first.stderr.contains("in progress"), "progress is shown while Apple works: \(first.stderr)")
            let sent = mock.massExtensionRequests
            #expect(sent.count == 1 && sent.first?.requestIdentifier == answer["requestIdentifier"] as? String)
            let audited = try await Self.auditRows(database)
            #expect(audited.map(\.operator) == ["carol"])

            let second = await SubsctlInProcess.run(arguments, environment: environment)
            #expect(second.status == 0, "\(second.stderr)")
            let again = try #require(try JSONSerialization.jsonObject(with: Data(second.stdout.utf8)) as? [String: Any], "\(second.stdout)")
            #expect(again["sent"] as? Bool == false && again["requestIdentifier"] as? String == answer["requestIdentifier"] as? String)
            #expect(second.stderr.contains("earlier run"), "\(second.stderr)")
            #expect(mock.massExtensionRequests.count == 1, "the same request is not sent to Apple again")
            let auditedAgain = try await Self.auditRows(database)
            #expect(auditedAgain.count == 1)
        }
    }

    @Test func refusalsAreClearAndAnUnsentRequestIsSentOnTheNextRun() async throws {
        try await Self.with { mock, database, environment in
            let tooLong = await SubsctlInProcess.run(
                ["apple", "extend-all", "--product", "p", "--days", "91", "--reason", "outage"], environment: environment)
            #expect(tooLong.status == 64 && tooLong.stderr.contains("1 to 90"), "\(tooLong.stderr)")
            let noReason = await SubsctlInProcess.run(["apple", "extend-all", "--product", "p", "--days", "3"], environment: environment)
            #expect(noReason.status == 64 && noReason.stderr.contains("--reason is required"), "\(noReason.stderr)")
            let badStorefront = await SubsctlInProcess.run(
                ["apple", "extend-all", "--product", "p", "--days", "3", "--reason", "r", "--storefronts", "US"], environment: environment)
            #expect(badStorefront.status == 64 && badStorefront.stderr.contains("alpha-3"), "\(badStorefront.stderr)")
            #expect(mock.massExtensionRequests.isEmpty)

            let id = UUID().uuidString.lowercased()
            let arguments = [
                "apple", "extend-all", "--product", "com.example.monthly", "--days", "3", "--reason", "outage", "--request-id", id,
                "--no-wait",
            ]
            mock.enqueue(.init(status: 400, errorCode: 4_000_023, pathPrefix: "/inApps/v1/subscriptions/extend/mass"))
            let refused = await SubsctlInProcess.run(arguments, environment: environment)
            #expect(refused.status == 1 && refused.stderr.contains("4000023"), "\(refused.stderr)")
            let stored: String? = try await database.pool.query(
                "SELECT last_error FROM apple_renewal_extension WHERE request_identifier = \(UUID(uuidString: id)!)"
            ).single().decode("last_error")
            #expect(stored?.contains("4000023") == true)

            let retried = await SubsctlInProcess.run(arguments, environment: environment)
            #expect(retried.status == 0, "\(retried.stderr)")
            #expect(retried.stdout.contains("requestIdentifier=\(id)") && retried.stdout.contains("complete=false"), "\(retried.stdout)")
            #expect(mock.massExtensionRequests.map(\.requestIdentifier) == [id])
            let attempts = try await Self.auditRows(database)
            #expect(attempts.map(\.accepted) == ["false", "true"])

            let reused = await SubsctlInProcess.run(
                ["apple", "extend-all", "--product", "com.example.monthly", "--days", "4", "--reason", "outage", "--request-id", id],
                environment: environment)
            #expect(reused.status == 1 && reused.stderr.contains("another extension"), "\(reused.stderr)")
            #expect(mock.massExtensionRequests.count == 1)
        }
    }
}
