import Foundation
import ServiceRuntime
import Storage

/// `subsctl migrate`: the one place a deployment applies the schema migrations (the compose
/// `migrate` service, the Kubernetes set-up Job, deploy/local/run.sh); the services wait until
/// the schema has every migration they carry. Safe beside another run (one advisory lock). Each
/// migration runs under `MIGRATION_LOCK_TIMEOUT_MS` and logs its duration. `--check` only
/// reports where the schema stands (exit 1 while migrations are missing).
enum MigrateCommand: SubsctlCommand {
    static let path = ["migrate"]
    static let usage = "migrate [--check] [--json]"
    static let summary =
        "Apply the database schema migrations not applied yet (DATABASE_URL, MIGRATION_LOCK_TIMEOUT_MS); print their versions. --check: only report"

    /// `--check`'s answer.
    struct Status: Encodable {
        let required: Int
        let current: Int
        let missing: [Int]
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let asJSON = arguments.flag("json")
        let checkOnly = arguments.flag("check")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        let reader = ConfigurationReader(environment: Subsctl.environment)
        let lockTimeout = Migrator.lockTimeout(reader: reader)
        guard reader.problems.isEmpty else {
            for problem in reader.problems { Subsctl.printError("\(problem)") }
            return ExitStatus.configuration
        }
        return await Subsctl.withDatabase { pool in
            let migrator = Migrator(pool: pool, logger: Subsctl.logger, lockTimeout: lockTimeout)
            if checkOnly {
                let state = try await migrator.state(of: Migrator.bundled())
                try Subsctl.printResult(Status(required: state.required, current: state.current, missing: state.missing), asJSON: asJSON) {
                    "schema: \(state) (this release needs \(state.required))"
                }
                return state.isReady ? ExitStatus.success : ExitStatus.refused
            }
            let applied = try await migrator.migrate(Migrator.bundled())
            try Subsctl.printResult(["applied": applied], asJSON: asJSON) {
                "migrations applied: \(applied.isEmpty ? "none (up to date)" : applied.map(String.init).joined(separator: ","))"
            }
            return ExitStatus.success
        }
    }
}
