import Postgres

/// An INSERT of many rows from `unnest()` arrays, each column declared once with its values and
/// what a conflict does to it; interpolated into a statement (`\(insert)`) it renders the column
/// list, the arrays and the conflict clause, all from constants, the values bound as parameters.
public struct BatchInsert: Sendable {
    /// One column: its name, the SQL type of its array, one value per row, its conflict rule.
    public struct Column: Sendable {
        let name: StaticString
        let arrayType: StaticString
        let values: PostgresData
        let onConflict: OnConflict

        public init<Value: PostgresEncodable>(
            _ name: StaticString, _ arrayType: StaticString, _ values: [Value], onConflict: OnConflict = .overwrite
        ) {
            self.name = name
            self.arrayType = arrayType
            self.values = PostgresArray(values).postgresData
            self.onConflict = onConflict
        }
    }

    /// What an upsert does to a column of the row already stored.
    public enum OnConflict: Sendable {
        /// Left as stored (a key, or a value only the first insert sets).
        case keep
        /// Takes the new row's value.
        case overwrite
        /// Takes an expression (`coalesce(t.user_id, EXCLUDED.user_id)`).
        case set(StaticString)
    }

    /// What a row whose key is already stored does.
    public enum Conflict: Sendable {
        /// Nothing to conflict on (an append-only table).
        case none
        case doNothing
        /// Updates the columns by their rules, then `also` (`updated_at = now()`).
        case update(target: StaticString, also: StaticString)
    }

    let table: StaticString
    let columns: [Column]
    let conflict: Conflict

    public init(into table: StaticString, _ columns: [Column], conflict: Conflict) {
        self.table = table
        self.columns = columns
        self.conflict = conflict
    }
}

extension PostgresQuery.StringInterpolation {
    /// `INSERT INTO table (a, b) SELECT * FROM unnest($1::t[], $2::t[]) [ON CONFLICT ...] RETURNING 1`.
    public mutating func appendInterpolation(_ insert: BatchInsert) {
        appendLiteral("INSERT INTO ")
        appendInterpolation(sql: insert.table)
        appendLiteral(" (")
        for (index, column) in insert.columns.enumerated() {
            if index > 0 { appendLiteral(", ") }
            appendInterpolation(sql: column.name)
        }
        appendLiteral(") SELECT * FROM unnest(")
        for (index, column) in insert.columns.enumerated() {
            if index > 0 { appendLiteral(", ") }
            appendInterpolation(column.values)
            appendLiteral("::")
            appendInterpolation(sql: column.arrayType)
        }
        appendLiteral(")")
        switch insert.conflict {
        case .none:
            break
        case .doNothing:
            appendLiteral(" ON CONFLICT DO NOTHING")
        case .update(let target, let also):
            appendLiteral(" ON CONFLICT ")
            appendInterpolation(sql: target)
            appendLiteral(" DO UPDATE SET ")
            for column in insert.columns {
                switch column.onConflict {
                case .keep:
                    continue
                case .overwrite:
                    appendInterpolation(sql: column.name)
                    appendLiteral(" = EXCLUDED.")
                    appendInterpolation(sql: column.name)
                case .set(let expression):
                    appendInterpolation(sql: column.name)
                    appendLiteral(" = ")
                    appendInterpolation(sql: expression)
                }
                appendLiteral(", ")
            }
            appendInterpolation(sql: also)
        }
        appendLiteral(" RETURNING 1")
    }
}
