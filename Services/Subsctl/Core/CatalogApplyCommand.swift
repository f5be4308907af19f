import Catalogue
import Foundation
import Postgres

/// `subsctl catalog apply`: upserts the products of a catalogue file (format:
/// Shared/Catalogue/README.md) into the database of `DATABASE_URL`, one audit row per change.
enum CatalogApplyCommand: SubsctlCommand {
    static let path = ["catalog", "apply"]
    static let usage = "catalog apply [--operator NAME] [--reason TEXT] [--json] FILE"
    static let summary =
        "Upsert the catalogue FILE into DATABASE_URL (version bump and audit row per changed product); print what changed."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let operatorName = arguments.operatorName()
        let reason = arguments.option("reason")
        let asJSON = arguments.flag("json")
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
        return await Subsctl.withDatabase { pool in
            let result = try await CatalogueStore(pool: pool).apply(
                file, operator: operatorName, reason: reason ?? "subsctl catalog apply \(URL(fileURLWithPath: path).lastPathComponent)")
            let changes = ["inserted": result.inserted, "updated": result.updated, "unchanged": result.unchanged]
            try Subsctl.printResult(changes, asJSON: asJSON) {
                let lines =
                    result.inserted.map { "inserted \($0)" } + result.updated.map { "updated \($0)" }
                    + result.unchanged.map { "unchanged \($0)" }
                return (lines + ["inserted=\(result.inserted.count) updated=\(result.updated.count) unchanged=\(result.unchanged.count)"])
                    .joined(separator: "\n")
            }
            return ExitStatus.success
        }
    }
}
