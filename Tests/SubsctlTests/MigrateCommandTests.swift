import Foundation
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// `subsctl migrate`, the one place a deployment migrates: `--check` reports without changing
/// anything, and the database's address may come from a mounted file.
@Suite(.timeLimit(.minutes(2)))
struct MigrateCommandTests {
    @Test func statusReportsThenMigrateAppliesFromAURLInAFile() async throws {
        let serverURL = try TestEnvironment.databaseURL()
        let name = TestEnvironment.uniqueName("migrate")
        let admin = PostgresPool(
            configuration: TestEnvironment.poolConfiguration(url: serverURL, maximumConnections: 1), logger: .init(label: "test"))
        try await withResource(
            { try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)")) },
            cleanUp: { _ in await admin.shutdown() }
        ) { _ in
            var components = try #require(URLComponents(string: serverURL))
            components.path = "/" + name
            let url = try #require(components.string)
            let file = NSTemporaryDirectory() + "subs-database-url-\(UUID().uuidString)"
            try Data((url + "\n").utf8).write(to: URL(fileURLWithPath: file))
            defer { try? FileManager.default.removeItem(atPath: file) }
            let environment = ["DATABASE_URL_FILE": file]
            let before = await SubsctlInProcess.run(["migrate", "--check", "--json"], environment: environment)
            #expect(before.status == 1, "\(before.stderr)")
            #expect(before.stdout.hasPrefix("{"), "\(before.stdout) \(before.stderr)")
            let status = try #require(try JSONSerialization.jsonObject(with: Data(before.stdout.utf8)) as? [String: Any])
            // Every migration of this release is missing from the empty database.
            let versions = try #require(status["missing"] as? [Int])
            #expect(versions.count > 30 && versions == versions.sorted() && status["current"] as? Int == 0, "\(before.stdout)")
            #expect(status["required"] as? Int == versions.last)

            let migrated = await SubsctlInProcess.run(["migrate", "--json"], environment: environment)
            #expect(migrated.status == 0, "\(migrated.stderr)")
            #expect(migrated.stdout.contains("\"applied\":[\(versions.map(String.init).joined(separator: ","))]"), "\(migrated.stdout)")

            let after = await SubsctlInProcess.run(["migrate", "--check"], environment: environment)
            #expect(after.status == 0)
            #expect(after.stdout.contains("schema: ok (this release needs \(versions.last!))"), "\(after.stdout)")

            // Both the variable and its file: refused before anything is touched.
            let both = await SubsctlInProcess.run(["migrate"], environment: ["DATABASE_URL": url, "DATABASE_URL_FILE": file])
            #expect(both.status == 78)
            #expect(both.stderr.contains("DATABASE_URL or DATABASE_URL_FILE, not both"), "\(both.stderr)")
        }
    }
}
