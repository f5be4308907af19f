import Foundation
import Storage

/// `subsctl migrate`: applies the schema migrations the services would apply at start-up, so a
/// deployment's set-up step (the compose `init` service, the Kubernetes Job) can load the
/// catalogue and the rates before any service runs. Safe beside starting services (one advisory lock).
enum MigrateCommand: SubsctlCommand {
    static let path = ["migrate"]
    static let usage = "migrate [--json]"
    static let summary = "Apply the database schema migrations not applied yet (DATABASE_URL); print their versions."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        return await Subsctl.withDatabase { pool in
            let applied = try await Migrator(pool: pool, logger: Subsctl.logger).migrate(Migrator.bundled())
            try Subsctl.printResult(["applied": applied], asJSON: asJSON) {
                "migrations applied: \(applied.isEmpty ? "none (up to date)" : applied.map(String.init).joined(separator: ","))"
            }
            return ExitStatus.success
        }
    }
}
