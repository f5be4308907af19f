/// Settings of a pool. Default values documented.
public struct PostgresConfiguration: Sendable {
    /// libpq connection URI (`DATABASE_URL`); its parameters (e.g. `options`, `sslmode`) are kept.
    public var url: String
    /// Most connections open at once, busy or idle. Default 10.
    public var maximumConnections: Int
    /// How long a caller waits for a free connection before `.acquireTimeout`. Default 5 s.
    public var acquireTimeout: Duration
    /// How long opening one connection may take (libpq counts whole seconds, at least 2). Default 5 s.
    public var connectTimeout: Duration
    /// `application_name` shown in `pg_stat_activity`. Default "subscriptions".
    public var applicationName: String
    /// Prepared statements kept per connection, least recently used evicted first. Default 256.
    public var statementCacheCapacity: Int

    public init(
        url: String, maximumConnections: Int = 10, acquireTimeout: Duration = .seconds(5),
        connectTimeout: Duration = .seconds(5), applicationName: String = "subscriptions",
        statementCacheCapacity: Int = 256
    ) {
        self.url = url
        self.maximumConnections = maximumConnections
        self.acquireTimeout = acquireTimeout
        self.connectTimeout = connectTimeout
        self.applicationName = applicationName
        self.statementCacheCapacity = statementCacheCapacity
    }
}

/// How strictly concurrent transactions are isolated from each other.
public enum PostgresIsolation: Sendable {
    case readCommitted, repeatableRead, serializable

    var sql: String {
        switch self {
        case .readCommitted: "READ COMMITTED"
        case .repeatableRead: "REPEATABLE READ"
        case .serializable: "SERIALIZABLE"
        }
    }
}
