/// The rows of one statement, copied out of libpq (text format), plus its affected-row count.
public struct PostgresRows: Sendable, RandomAccessCollection {
    /// Immutable after creation, shared by the rows that point into it.
    final class Storage: Sendable {
        let columns: [String]
        let columnIndex: [String: Int]
        let rowCount: Int
        let values: [String?]  // row-major

        init(columns: [String], rowCount: Int, values: [String?]) {
            self.columns = columns
            self.rowCount = rowCount
            self.values = values
            var index: [String: Int] = [:]
            for (position, name) in columns.enumerated() where index[name] == nil { index[name] = position }
            columnIndex = index
        }
    }

    let storage: Storage
    /// Rows inserted, updated, deleted, selected... as reported by the command tag; 0 when none.
    public let affectedRows: Int

    init(storage: Storage, affectedRows: Int) {
        self.storage = storage
        self.affectedRows = affectedRows
    }

    static let empty = PostgresRows(storage: Storage(columns: [], rowCount: 0, values: []), affectedRows: 0)

    public var columnNames: [String] { storage.columns }
    public var startIndex: Int { 0 }
    public var endIndex: Int { storage.rowCount }
    public subscript(position: Int) -> PostgresRow {
        precondition(indices.contains(position), "row index out of range")
        return PostgresRow(storage: storage, row: position)
    }
}

/// One result row; columns are read by name or position and decoded to a Swift type.
public struct PostgresRow: Sendable {
    let storage: PostgresRows.Storage
    let row: Int

    /// Decodes a column by name; `Optional` types turn NULL into nil, other types reject it.
    public func decode<T: PostgresDecodable>(_ column: String, as type: T.Type = T.self) throws -> T {
        guard let index = storage.columnIndex[column] else {
            throw PostgresError.decoding(column: column, reason: "no such column")
        }
        return try decode(index, name: column)
    }

    /// Decodes a column by position (0-based).
    public func decode<T: PostgresDecodable>(_ index: Int, as type: T.Type = T.self) throws -> T {
        guard storage.columns.indices.contains(index) else {
            throw PostgresError.decoding(column: "#\(index)", reason: "no such column")
        }
        return try decode(index, name: storage.columns[index])
    }

    /// True when the column is NULL (or absent).
    public func isNull(_ column: String) -> Bool {
        guard let index = storage.columnIndex[column] else { return true }
        return value(at: index) == nil
    }

    private func value(at index: Int) -> String? { storage.values[row * storage.columns.count + index] }

    private func decode<T: PostgresDecodable>(_ index: Int, name: String) throws -> T {
        guard let text = value(at: index) else {
            guard let null = T.postgresNull else {
                throw PostgresError.decoding(column: name, reason: "unexpected NULL for \(T.self)")
            }
            return null
        }
        do {
            return try T(postgresText: text)
        } catch {
            throw PostgresError.decoding(column: name, reason: "\(T.self): \(error)")
        }
    }
}

extension PostgresRows {
    /// The one row a statement answers (an aggregate, a function call, a single-row RETURNING); a
    /// clear error instead of a trap when the database answers otherwise.
    public func single() throws -> PostgresRow {
        guard count == 1 else {
            throw PostgresError.decoding(column: "*", reason: "the statement answered \(count) rows where it answers one")
        }
        return self[startIndex]
    }
}
