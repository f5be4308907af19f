import Foundation
import Postgres
import Storage

/// `subsctl test-user`: flags (or unflags) a business user as a test user, with an audit row.
///
/// On a Production deployment a Sandbox fact (TestFlight, App Review, a tester's Sandbox account)
/// only touches flagged users; any other is refused as `SANDBOX_REFUSED` (domain.md). A user not
/// seen yet is created, so a tester can be flagged before their first purchase.
enum TestUserCommand: SubsctlCommand {
    static let path = ["test-user"]
    static let usage = "test-user --user-id ID --enable true|false [--reason TEXT] [--operator NAME] [--json]"
    static let summary =
        "Flag a user as a test user (their Sandbox purchases count on a Production deployment) or clear the flag; print before and after."

    /// The `--json` answer, the admin API's.
    struct Output: Encodable {
        var userId: String
        var isTestUser: Bool
        var wasTestUser: Bool
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let user = arguments.option("user-id")
        let choice = arguments.option("enable")?.lowercased()
        let reason = arguments.option("reason") ?? "test user"
        let operatorName = arguments.operatorName()
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let user, !user.isEmpty, user.count <= 128 else { return usageError("--user-id must be a user id of 1 to 128 characters") }
        let enable: Bool
        switch choice {
        case "true", "yes", "on": enable = true
        case "false", "no", "off": enable = false
        default: return usageError("--enable must be true or false")
        }
        return await Subsctl.withDatabase { pool in
            let before = try await UserStore(pool: pool).setTestUser(user, enabled: enable, operator: operatorName, reason: reason)
            try Subsctl.printResult(Output(userId: user, isTestUser: enable, wasTestUser: before), asJSON: asJSON) {
                "user=\(user) testUser=\(enable) (was \(before))"
            }
            return ExitStatus.success
        }
    }
}
