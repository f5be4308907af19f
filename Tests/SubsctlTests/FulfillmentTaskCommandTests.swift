import Foundation
import Testing

/// `subsctl requery`, `recover`, `consent`, `test-user` and `replay` refuse bad input before touching any database
/// (what they do with one is tested end to end, against running workers).
@Suite struct FulfillmentTaskCommandTests {
    @Test(arguments: [
        (["requery", "--env", "Sandbox"], "--original-transaction-id"),
        (["requery", "--original-transaction-id", "1/2", "--env", "Sandbox"], "--original-transaction-id"),
        (["requery", "--original-transaction-id", "1000", "--env", "Xcode"], "--env"),
        (["requery", "--original-transaction-id", "1000", "--env", "Sandbox", "--wait", "-1"], "--wait"),
        (["recover", "--from", "yesterday", "--to", "2026-01-01T00:00:00Z", "--env", "Sandbox"], "RFC 3339"),
        (["recover", "--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z", "--env", "Sandbox"], "before --to"),
        (["recover", "--from", "2099-01-01T00:00:00Z", "--to", "2099-01-02T00:00:00Z", "--env", "Production"], "future"),
        (["recover", "--from", "2020-01-01T00:00:00Z", "--to", "2020-01-02T00:00:00Z", "--env", "Production"], "180 days"),
        (["consent", "--user-id", "u1", "--consumption-data", "maybe"], "granted, denied or unknown"),
        (["consent", "--consumption-data", "granted"], "--user-id"),
        (["test-user", "--user-id", "u1", "--enable", "maybe"], "--enable must be true or false"),
        (["test-user", "--enable", "true"], "--user-id"),
        (["replay", "--error-code", "unmatched product"], "--error-code must be an error code"),
        (["replay"], "--error-code must be an error code"),
        (["requery", "--original-transaction-id", "1000", "--env", "Sandbox", "--typo", "x"], "unknown option --typo"),
    ])
    func badInputIsAUsageError(arguments: [String], complaint: String) async throws {
        let run = await SubsctlInProcess.run(arguments, environment: [:])
        #expect(run.status == 64, "\(run.stderr)")
        #expect(run.stderr.contains(complaint), "\(run.stderr)")
    }

    @Test func withoutADatabaseNothingIsRequested() async throws {
        let run = await SubsctlInProcess.run(["requery", "--original-transaction-id", "1000", "--env", "Sandbox"], environment: [:])
        #expect(run.status == 78)
        #expect(run.error.contains("DATABASE_URL is not set"))
    }

    @Test func theCommandsAreListed() async throws {
        let run = await SubsctlInProcess.run(["help"], environment: [:])
        for usage in [
            "subsctl requery --original-transaction-id", "subsctl recover --from", "subsctl consent --user-id", "subsctl test-user --user-id",
            "subsctl replay --error-code",
        ] {
            #expect(run.stdout.contains(usage), "\(run.stdout)")
        }
    }
}
