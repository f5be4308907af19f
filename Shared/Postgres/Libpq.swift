import CPostgres
import Foundation
import ServiceRuntime

/// Parameters handed to libpq when opening a connection.
struct ConnectionSettings: Sendable {
    let url: String
    let applicationName: String
    let connectTimeout: Duration

    init(_ configuration: PostgresConfiguration) {
        url = configuration.url
        applicationName = configuration.applicationName
        connectTimeout = configuration.connectTimeout
    }

    /// libpq lets later keywords override earlier ones: the keep-alive defaults come before the
    /// URL (which may tune them), the pool's own settings after it (they always apply).
    var keywords: [(String, String)] {
        let seconds = max(
            2,
            Int(
                (connectTimeout.inSeconds).rounded(.up)))
        return [
            // Detects a vanished server within about a minute, even on an idle or LISTEN socket.
            ("keepalives", "1"), ("keepalives_idle", "30"), ("keepalives_interval", "10"), ("keepalives_count", "3"),
            // libpq's default (prefer) probes Kerberos on every connect; Debian's libkrb5 aborted in
            // k5_mutex_lock under concurrent connects. A URL that wants GSS encryption still says so.
            ("gssencmode", "disable"),
            ("dbname", url),
            ("application_name", applicationName), ("connect_timeout", String(seconds)), ("client_encoding", "UTF8"),
        ]
    }
}

/// Owns one PGconn and speaks libpq's blocking API.
///
/// Not Sendable, like the PGconn it wraps: each owner confines it to one serial queue or thread.
/// `PQfinish` runs exactly once, in `finish()` or deinit, including after a failed connect.
final class LibpqConnection {
    private var handle: OpaquePointer?
    private let logger: Logger
    /// Set when the server reported a connection-level error before libpq noticed the socket closing.
    private var forcedBroken = false

    /// The session settings the decoders rely on.
    private static let sessionSetup =
        "SET TIME ZONE 'UTC'; SET DateStyle TO 'ISO, MDY'; SET IntervalStyle TO 'postgres'; SET bytea_output TO 'hex'"

    private init(handle: OpaquePointer, logger: Logger) {
        self.handle = handle
        self.logger = logger
    }

    deinit { finish() }

    /// Blocks until connected (at most the connect timeout), then prepares the session.
    static func connect(_ settings: ConnectionSettings, logger: Logger) throws -> LibpqConnection {
        let keywords = settings.keywords
        let opened = withCStrings(keywords.map(\.0) + [nil]) { names in
            withCStrings(keywords.map(\.1) + [nil]) { values in PQconnectdbParams(names, values, 1) }
        }
        guard let opened else { throw PostgresError.connectionFailed("libpq could not allocate a connection") }
        let connection = LibpqConnection(handle: opened, logger: logger)
        guard PQstatus(opened) == CONNECTION_OK else { throw PostgresError.connectionFailed(connection.errorMessage) }
        // Notices ("relation already exists, skipping") go to the log, not to stderr. The
        // connection outlives its handle, so the unretained pointer stays valid for every call.
        PQsetNoticeReceiver(opened, noticeReceiver, Unmanaged.passUnretained(connection).toOpaque())
        _ = try connection.exec(sessionSetup)
        return connection
    }

    func finish() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    var isBroken: Bool { forcedBroken || handle.map { PQstatus($0) != CONNECTION_OK } ?? true }

    /// True outside any transaction block.
    var isIdle: Bool { handle.map { PQtransactionStatus($0) == PQTRANS_IDLE } ?? false }

    /// True inside a transaction block that failed and only accepts ROLLBACK.
    var isInFailedTransaction: Bool { handle.map { PQtransactionStatus($0) == PQTRANS_INERROR } ?? false }

    var errorMessage: String {
        guard let handle, let message = PQerrorMessage(handle) else { return "connection closed" }
        return String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    var socket: Int32 { handle.map { PQsocket($0) } ?? -1 }

    /// Runs SQL through the simple query protocol: no parameters, possibly several statements.
    func exec(_ sql: String) throws -> PostgresRows {
        let handle = try open()
        return try collect(PQexec(handle, sql))
    }

    func prepare(_ name: String, _ sql: String, types: [PostgresDataType]) throws {
        let handle = try open()
        let oids = types.map(\.rawValue)
        _ = try collect(PQprepare(handle, name, sql, Int32(oids.count), oids))
    }

    func execPrepared(_ name: String, _ binds: [PostgresData]) throws -> PostgresRows {
        let handle = try open()
        // PostgreSQL text cannot hold NUL and C strings would silently truncate at it.
        if binds.contains(where: { $0.text?.utf8.contains(0) ?? false }) {
            throw PostgresError.server(
                sqlState: .characterNotInRepertoire, message: "a parameter contains a NUL character", constraint: nil)
        }
        let result = withParameters(binds) { values, lengths, formats in
            PQexecPrepared(handle, name, Int32(binds.count), values, lengths, formats, 0)
        }
        return try collect(result)
    }

    /// Non-blocking health check of a connection that sat idle: reads whatever the server sent
    /// meanwhile, so a server restart (a FATAL message, then end of file) shows up as broken.
    func survivedIdling() -> Bool {
        guard let handle, !isBroken, isIdle else { return false }
        var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
        // A dead socket needs two reads: one returns the FATAL message, the next end of file.
        for _ in 0..<4 {
            guard poll(&descriptor, 1, 0) > 0 else { break }
            guard PQconsumeInput(handle) == 1 else { return false }
        }
        return !isBroken
    }

    /// Reads what arrived on the socket; false when the connection is lost.
    func consumeInput() -> Bool {
        guard let handle else { return false }
        return PQconsumeInput(handle) == 1 && !isBroken
    }

    /// Notifications parsed from the input consumed so far.
    func notifications() -> [PostgresNotification] {
        guard let handle else { return [] }
        var received: [PostgresNotification] = []
        while let notify = PQnotifies(handle) {
            received.append(
                PostgresNotification(
                    channel: String(cString: notify.pointee.relname), payload: String(cString: notify.pointee.extra)))
            PQfreemem(notify)
        }
        return received
    }

    fileprivate func log(notice: OpaquePointer) {
        func field(_ code: Character) -> String {
            PQresultErrorField(notice, Int32(code.asciiValue!)).map { String(cString: $0) } ?? ""
        }
        logger.debug(
            "PostgreSQL notice",
            ["sql.state": .string(field("C")), "sql.severity": .string(field("V")), "sql.message": .string(field("M"))])
    }

    private func open() throws -> OpaquePointer {
        guard let handle, !forcedBroken else { throw PostgresError.connectionFailed("connection is closed") }
        return handle
    }

    /// Turns a PGresult into rows or an error, and frees it.
    private func collect(_ result: OpaquePointer?) throws -> PostgresRows {
        guard let result else { throw PostgresError.connectionFailed(errorMessage) }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return rows(of: result)
        case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
            // The session now waits for COPY data this client never sends: unusable.
            forcedBroken = true
            throw PostgresError.server(sqlState: .featureNotSupported, message: "COPY is not supported", constraint: nil)
        default:
            throw error(of: result)
        }
    }

    private func error(of result: OpaquePointer) -> PostgresError {
        func field(_ code: Character) -> String? {
            PQresultErrorField(result, Int32(code.asciiValue!)).map { String(cString: $0) }
        }
        let message = field("M") ?? errorMessage
        let sqlState = field("C").map(PostgresError.Code.init(rawValue:))
        // Class 08 is "connection exception"; 57P01-57P03 are the server shutting down or starting.
        if let sqlState, sqlState.hasPrefix("08") || [.adminShutdown, .crashShutdown, .cannotConnectNow].contains(sqlState) {
            forcedBroken = true
        }
        guard let sqlState, !isBroken else {
            // No SQLSTATE means libpq itself gave up on the exchange (a failed send, a lost
            // protocol state) although it may still call the session open: nothing known about
            // the session can be trusted, so it is dropped and the caller may retry elsewhere.
            forcedBroken = true
            return .connectionFailed(message)
        }
        let constraint = field("n")
        if sqlState == .uniqueViolation { return .uniqueViolation(constraint: constraint, detail: field("D") ?? message) }
        return .server(sqlState: sqlState, message: message, constraint: constraint)
    }

    private func rows(of result: OpaquePointer) -> PostgresRows {
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        let rowCount = PQntuples(result)
        let columnCount = PQnfields(result)
        let columns = (0..<columnCount).map { String(cString: PQfname(result, $0)) }
        var values: [String?] = []
        values.reserveCapacity(Int(rowCount) * Int(columnCount))
        for row in 0..<rowCount {
            for column in 0..<columnCount {
                guard PQgetisnull(result, row, column) == 0, let value = PQgetvalue(result, row, column) else {
                    values.append(nil)
                    continue
                }
                let length = Int(PQgetlength(result, row, column))
                values.append(
                    value.withMemoryRebound(to: UInt8.self, capacity: length) {
                        String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
                    })
            }
        }
        let storage = PostgresRows.Storage(columns: columns, rowCount: Int(rowCount), values: values)
        return PostgresRows(storage: storage, affectedRows: affected)
    }
}

/// Receives the notices of every connection; the argument is the `LibpqConnection`.
private let noticeReceiver: PQnoticeReceiver = { argument, notice in
    guard let argument, let notice else { return }
    Unmanaged<LibpqConnection>.fromOpaque(argument).takeUnretainedValue().log(notice: notice)
}

/// Calls `body` with libpq's parameter arrays (values, lengths, formats: 0 text, 1 binary), valid
/// only during the call. A NULL value pointer is SQL NULL, so even an empty binary value gets a buffer.
private func withParameters<R>(
    _ binds: [PostgresData],
    _ body: (UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> R
) -> R {
    let copies: [UnsafeMutablePointer<CChar>?] = binds.map { bind in
        if let bytes = bind.binary {
            let buffer = malloc(max(1, bytes.count))!
            bytes.withUnsafeBytes { if let base = $0.baseAddress { buffer.copyMemory(from: base, byteCount: bytes.count) } }
            return buffer.assumingMemoryBound(to: CChar.self)
        }
        return bind.text.map { strdup($0)! }
    }
    defer { copies.forEach { free($0) } }
    let pointers = copies.map { $0.map { UnsafePointer($0) } }
    let lengths = binds.map { Int32($0.binary?.count ?? 0) }
    let formats = binds.map { Int32($0.binary == nil ? 0 : 1) }
    return pointers.withUnsafeBufferPointer { values in
        lengths.withUnsafeBufferPointer { lengths in
            formats.withUnsafeBufferPointer { formats in body(values.baseAddress, lengths.baseAddress, formats.baseAddress) }
        }
    }
}

/// Calls `body` with a C array of C strings (nil entries stay NULL), valid only during the call.
private func withCStrings<R>(_ strings: [String?], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> R) -> R {
    let copies = strings.map { $0.map { strdup($0)! } }
    defer { copies.forEach { free($0) } }
    let pointers = copies.map { $0.map { UnsafePointer($0) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress) }
}
