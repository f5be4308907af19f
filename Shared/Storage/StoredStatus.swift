import Postgres

/// A status column's values as a Swift enum: bound and read by its raw value, so no statement
/// spells a status as a string of its own.
public protocol StoredStatus: RawRepresentable, PostgresEncodable, PostgresDecodable, CaseIterable
where RawValue == String {}

extension StoredStatus {
    public var postgresData: PostgresData { rawValue.postgresData }
    public static var postgresDataType: PostgresDataType { String.postgresDataType }

    public init(postgresText text: String) throws {
        guard let value = Self(rawValue: text) else { throw UnknownStoredStatus(type: "\(Self.self)") }
        self = value
    }
}

/// A status column held a value this version does not know (a newer schema, a manual edit).
public struct UnknownStoredStatus: Error, CustomStringConvertible {
    public let type: String
    public var description: String { "a stored \(type) is not one this version knows" }
}
