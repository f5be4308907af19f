import Catalogue
import Foundation
import Postgres

/// `subsctl catalog apply`: upserts the products of a catalogue file (format:
/// Shared/Catalogue/README.md) into the database of `DATABASE_URL`, one audit row per change.
enum CatalogApplyCommand: SubsctlCommand {
    static let path = ["catalog", "apply"]
    static let usage = "catalog apply [--operator NAME] [--reason TEXT] FILE"
    static let summary =
        "Upsert the catalogue FILE into DATABASE_URL (version bump and audit row per changed product); print what changed."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let environment = ProcessInfo.processInfo.environment
        let operatorName = arguments.option("operator") ?? environment["USER"] ?? "subsctl"
        let reason = arguments.option("reason")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.count == 1 else { return usageError("give exactly one FILE") }
        let path = arguments.positionals[0]
        guard FileManager.default.isReadableFile(atPath: path) else {
            Subsctl.printError("cannot read \(path)")
            return ExitStatus.noInput
        }
        let file: CatalogueFile
        do { file = try CatalogueFile.load(path: path) } catch {
            Subsctl.printError("\(path) refused, nothing applied:\n\(error.description)")
            return ExitStatus.refused
        }
        guard let url = environment["DATABASE_URL"], !url.isEmpty else {
            Subsctl.printError("DATABASE_URL is not set")
            return ExitStatus.configuration
        }
        let pool = PostgresPool(configuration: PostgresConfiguration(url: url, maximumConnections: 1), logger: Subsctl.logger)
        let outcome: Result<CatalogueApplyResult, any Error>
        do {
            outcome = .success(
                try await CatalogueStore(pool: pool).apply(
                    file, operator: operatorName, reason: reason ?? "subsctl catalog apply \(URL(fileURLWithPath: path).lastPathComponent)"))
        } catch {
            outcome = .failure(error)
        }
        await pool.shutdown()
        switch outcome {
        case .success(let result):
            let lines = result.inserted.map { "inserted \($0)" } + result.updated.map { "updated \($0)" }
                + result.unchanged.map { "unchanged \($0)" }
            Subsctl.printOutput(
                (lines + ["inserted=\(result.inserted.count) updated=\(result.updated.count) unchanged=\(result.unchanged.count)"])
                    .joined(separator: "\n"))
            return ExitStatus.success
        case .failure(let error as PostgresError) where error.sqlState == "42P01":
            Subsctl.printError("the database has no catalogue table yet: start the ingress once (it migrates the schema)")
            return ExitStatus.configuration
        case .failure(let error as PostgresError) where error.isRetryable:
            Subsctl.printError("catalogue not applied, database unavailable: \(error)")
            return ExitStatus.temporaryFailure
        case .failure(let error):
            Subsctl.printError("catalogue not applied: \(error)")
            return ExitStatus.refused
        }
    }
}
