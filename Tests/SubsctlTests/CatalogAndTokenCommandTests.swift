import Crypto
import Foundation
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// `subsctl catalog apply` against a real database, and `subsctl dev-token`.
@Suite(.timeLimit(.minutes(2)))
struct CatalogAndTokenCommandTests {
    static let demoPath = ServiceProcess.packageRoot.appendingPathComponent("deploy/local/catalog.json").path

    @Test func catalogApplyUpsertsAndReportsWhatChanged() async throws {
        try await withTestDatabase("subsctl") { database in
            let environment = ["DATABASE_URL": database.url]
            let first = await SubsctlInProcess.run(
                ["catalog", "apply", "--operator", "ops-alice", "--reason", "demo", Self.demoPath], environment: environment)
            #expect(first.status == 0, "\(first.stderr)")
            #expect(first.stdout.split(separator: "\n").last == "inserted=3 updated=0 unchanged=0")
            #expect(first.stdout.contains("inserted com.example.pro.yearly"))
            #expect(try await database.count("SELECT count(*) FROM payment_product WHERE version = 1") == 3)
            #expect(try await database.count("SELECT count(*) FROM audit_log WHERE operator = 'ops-alice' AND reason = 'demo'") == 3)

            let again = await SubsctlInProcess.run(["catalog", "apply", Self.demoPath], environment: environment)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(again.stdout.split(separator: "\n").last == "inserted=0 updated=0 unchanged=3")
            #expect(try await database.count("SELECT count(*) FROM audit_log") == 3)

            // A changed file: one product updated, its version bumped, one more audit row.
            let text = try String(contentsOfFile: Self.demoPath, encoding: .utf8)
            let changed = FileManager.default.temporaryDirectory.appendingPathComponent("catalog-\(UUID().uuidString).json")
            defer { try? FileManager.default.removeItem(at: changed) }
            try text.replacingOccurrences(of: "\"creditsAmount\": 1000", with: "\"creditsAmount\": 1200").write(
                to: changed, atomically: true, encoding: .utf8)
            let third = await SubsctlInProcess.run(["catalog", "apply", changed.path], environment: environment)
            #expect(third.status == 0, "\(third.stderr)")
            #expect(third.stdout.contains("updated com.example.starter.monthly"))
            #expect(
                try await database.count(
                    "SELECT version FROM payment_product WHERE product_id = 'com.example.starter.monthly' AND credits_amount = 1200") == 2)
            #expect(
                try await database.count(
                    "SELECT count(*) FROM audit_log WHERE action = 'CATALOGUE_PRODUCT_UPDATED' AND reason LIKE 'subsctl catalog apply %'") == 1)

            // A file with a problem writes nothing.
            let broken = FileManager.default.temporaryDirectory.appendingPathComponent("catalog-\(UUID().uuidString).json")
            defer { try? FileManager.default.removeItem(at: broken) }
            try text.replacingOccurrences(of: "\"planLevel\": 2", with: "\"planLevel\": 0").write(to: broken, atomically: true, encoding: .utf8)
            let refused = await SubsctlInProcess.run(["catalog", "apply", broken.path], environment: environment)
            #expect(refused.status == 1)
            #expect(refused.stderr.contains("products[0].planLevel must be from 1"))
            #expect(try await database.count("SELECT count(*) FROM audit_log") == 4)
        }
    }

    @Test func catalogApplyExplainsWhatIsMissing() async throws {
        #expect(await SubsctlInProcess.run(["catalog", "apply", Self.demoPath], environment: [:]).status == 78, "DATABASE_URL unset")
        #expect(await SubsctlInProcess.run(["catalog", "apply", "/nonexistent.json"], environment: [:]).status == 66)
        #expect(await SubsctlInProcess.run(["catalog", "apply"], environment: [:]).status == 64)
        #expect(await SubsctlInProcess.run(["catalog", "apply", "--dry", "x", Self.demoPath], environment: [:]).status == 64)
        // A database nobody migrated yet.
        let serverURL = try TestEnvironment.databaseURL()
        let name = TestEnvironment.uniqueName("bare")
        let admin = PostgresPool(
            configuration: TestEnvironment.poolConfiguration(url: serverURL, maximumConnections: 1), logger: .init(label: "test"))
        let bare = try await withResource(
            { try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)")) },
            cleanUp: { _ in await admin.shutdown() }
        ) { _ in
            var components = try #require(URLComponents(string: serverURL))
            components.path = "/" + name
            return await SubsctlInProcess.run(["catalog", "apply", Self.demoPath], environment: ["DATABASE_URL": try #require(components.string)])
        }
        #expect(bare.status == 78)
        #expect(bare.error.contains("run `subsctl migrate` first"), "\(bare.stderr)")
    }

    /// The JSON object in segment `index` of a compact JWS.
    static func segment(_ token: String, _ index: Int) throws -> [String: Any] {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        let bytes = try #require(parts.indices.contains(index) ? Base64URL.decode(parts[index]) : nil)
        return try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    @Test func devTokenIsAnHS256TokenTheIngressAccepts() async throws {
        let secret = Base64URL.encode(SecureRandom.bytes(32))
        let before = Int(Date().timeIntervalSince1970)
        let run = await SubsctlInProcess.run(
            ["dev-token", "--user", "user-\"42\"", "--ttl", "600"], environment: ["USER_TOKEN_HS256_SECRET": secret])
        #expect(run.status == 0, "\(run.stderr)")
        let token = run.stdout.trimmingCharacters(in: .newlines)
        #expect(run.stdout == token + "\n", "only the token is printed")
        let parts = token.split(separator: ".").map(String.init)
        try #require(parts.count == 3)
        let signature = HMACSHA256.authenticate(key: Array(secret.utf8), message: Array("\(parts[0]).\(parts[1])".utf8))
        #expect(Base64URL.decode(parts[2]) == signature)
        let header = try Self.segment(token, 0)
        #expect(header["alg"] as? String == "HS256")
        let claims = try Self.segment(token, 1)
        #expect(claims["sub"] as? String == "user-\"42\"")
        let exp = try #require(claims["exp"] as? Int)
        #expect((before + 600...Int(Date().timeIntervalSince1970) + 600).contains(exp))

        let defaultTTL = await SubsctlInProcess.run(["dev-token", "--user", "u"], environment: ["USER_TOKEN_HS256_SECRET": secret])
        let defaultClaims = try Self.segment(defaultTTL.stdout.trimmingCharacters(in: .newlines), 1)
        #expect((defaultClaims["exp"] as? Int ?? 0) - (defaultClaims["iat"] as? Int ?? 0) == 3600)

        #expect(await SubsctlInProcess.run(["dev-token", "--user", "u"], environment: [:]).status == 78, "no secret")
        #expect(await SubsctlInProcess.run(["dev-token", "--user", "u"], environment: ["USER_TOKEN_HS256_SECRET": "short"]).status == 78)
        #expect(await SubsctlInProcess.run(["dev-token"], environment: ["USER_TOKEN_HS256_SECRET": secret]).status == 64, "no user")
        #expect(
            await SubsctlInProcess.run(["dev-token", "--user", "u", "--ttl", "0"], environment: ["USER_TOKEN_HS256_SECRET": secret]).status == 64)
        #expect(
            await SubsctlInProcess.run(["dev-token", "--user", "u", "--ttl", "abc"], environment: ["USER_TOKEN_HS256_SECRET": secret]).status == 64)
    }
}
