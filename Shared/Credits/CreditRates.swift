import Foundation
import Postgres
import ServiceRuntime
import Storage

/// One version of a rate: what a unit of a metered call costs from `effectiveFrom` on.
public struct RateVersion: Codable, Sendable, Hashable {
    public var code: String
    public var version: Int
    public var microCreditsPerUnit: Int64
    /// RFC 3339.
    public var effectiveFrom: String

    public init(code: String, version: Int, microCreditsPerUnit: Int64, effectiveFrom: String) {
        self.code = code
        self.version = version
        self.microCreditsPerUnit = microCreditsPerUnit
        self.effectiveFrom = effectiveFrom
    }
}

/// A rates file (`subsctl rates apply FILE`): `{"rates": [RateVersion, …]}`.
public struct RatesFile: Codable, Sendable, Hashable {
    public var rates: [RateVersion]

    public init(rates: [RateVersion]) { self.rates = rates }

    /// Reads and checks a file; every problem is listed, one per line.
    public static func load(path: String) throws(RatesFileError) -> RatesFile {
        let file: RatesFile
        do {
            file = try JSONDecoder().decode(RatesFile.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            throw RatesFileError(problems: ["not a rates file: \(error)"])
        }
        let problems = file.problems()
        guard problems.isEmpty else { throw RatesFileError(problems: problems) }
        return file
    }

    /// What makes the file unacceptable (empty when it is fine).
    public func problems() -> [String] {
        var problems: [String] = []
        var seen: Set<String> = []
        for (index, rate) in rates.enumerated() {
            let name = "rates[\(index)]"
            if rate.code.isEmpty || rate.code.count > 64
                || !rate.code.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) })
            {
                problems.append("\(name).code must be 1 to 64 letters, digits, '.', '_' or '-'")
            }
            if rate.version < 1 { problems.append("\(name).version must be at least 1") }
            if !(1...1_000_000_000_000).contains(rate.microCreditsPerUnit) {
                problems.append("\(name).microCreditsPerUnit must be between 1 and 10^12")
            }
            if RFC3339.date(from: rate.effectiveFrom) == nil { problems.append("\(name).effectiveFrom must be an RFC 3339 time") }
            if !seen.insert("\(rate.code)#\(rate.version)").inserted { problems.append("\(name) repeats \(rate.code) version \(rate.version)") }
        }
        return problems
    }
}

/// Why a rates file was refused.
public struct RatesFileError: Error, Sendable, CustomStringConvertible {
    public let problems: [String]
    public var description: String { problems.joined(separator: "\n") }
}

/// What applying a rates file did.
public struct RatesApplyResult: Sendable, Hashable {
    public var inserted: [String] = []
    public var unchanged: [String] = []
}

/// Rate versions are history: what was charged must stay explainable, so a version once stored
/// never changes; a new price is a new version with a later `effectiveFrom`.
public struct CreditRates: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Inserts the file's new versions in one transaction (an audit row each); identical ones are
    /// left alone; a stored version with other values refuses the whole file.
    @discardableResult
    public func apply(_ file: RatesFile, operator operatorName: String, reason: String) async throws -> RatesApplyResult {
        try await pool.transaction { db in
            var result = RatesApplyResult()
            for rate in file.rates {
                let name = "\(rate.code) v\(rate.version)"
                let effective = RFC3339.date(from: rate.effectiveFrom)!
                let rows = try await db.query(
                    """
                    WITH new AS (
                        INSERT INTO credit_rate_version (code, version, micro_credits_per_unit, effective_from)
                        VALUES (\(rate.code), \(rate.version), \(rate.microCreditsPerUnit), \(effective))
                        ON CONFLICT (code, version) DO NOTHING
                        RETURNING code
                    )
                    SELECT (SELECT count(*) FROM new) AS inserted,
                           (SELECT count(*) FROM credit_rate_version
                             WHERE code = \(rate.code) AND version = \(rate.version)
                               AND micro_credits_per_unit = \(rate.microCreditsPerUnit) AND effective_from = \(effective)) AS same
                    """)
                if try rows[0].decode("inserted", as: Int.self) == 1 {
                    try await AuditLog(pool: pool).record(
                        on: db, operator: operatorName, action: "CREDIT_RATE_VERSION_CREATED", reason: reason, before: nil,
                        after: rate)
                    result.inserted.append(name)
                } else if try rows[0].decode("same", as: Int.self) == 1 {
                    result.unchanged.append(name)
                } else {
                    throw RatesFileError(problems: ["\(name) is stored with other values; publish a new version instead"])
                }
            }
            return result
        }
    }
}
