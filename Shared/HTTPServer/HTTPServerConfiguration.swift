import ServiceRuntime

/// Limits and sizing of an `HTTPServer`.
public struct HTTPServerConfiguration: Sendable {
    /// A numeric IPv4 or IPv6 address (or `localhost`) to listen on.
    public var host: String
    /// 0 picks a free port; read `HTTPServer.port` after `start()`.
    public var port: Int
    /// MHD event-loop threads. On 2 cores 4 beat 1 and 2 (Tests/Benchmarks/http-vs-nginx.sh):
    /// a preempted thread then stalls fewer connections.
    public var threadPoolSize: Int
    /// Larger bodies get 413 `PAYLOAD_TOO_LARGE`: at once from Content-Length, before any body
    /// byte is read, or when a chunked body crosses the limit.
    public var maxBodyBytes: Int
    /// Approximate bound on the request line plus headers (it sizes MHD's per-connection memory
    /// pool; a larger head is answered by MHD itself with a 4xx).
    public var maxHeaderBytes: Int
    /// Open connections beyond this are refused.
    public var connectionLimit: Int
    /// A connection idle this long (a request head or body trickling in counts as idle between
    /// bytes) is closed; rounded up to whole seconds.
    public var idleTimeout: Duration
    /// How long `shutdown()` waits for running handlers before answering them 503 itself.
    public var shutdownGracePeriod: Duration

    public init(
        host: String = "0.0.0.0", port: Int = 8080, threadPoolSize: Int = 4, maxBodyBytes: Int = 256 * 1024,
        maxHeaderBytes: Int = 16 * 1024, connectionLimit: Int = 4096, idleTimeout: Duration = .seconds(30),
        shutdownGracePeriod: Duration = .seconds(10)
    ) {
        self.host = host
        self.port = port
        self.threadPoolSize = threadPoolSize
        self.maxBodyBytes = maxBodyBytes
        self.maxHeaderBytes = maxHeaderBytes
        self.connectionLimit = connectionLimit
        self.idleTimeout = idleTimeout
        self.shutdownGracePeriod = shutdownGracePeriod
    }
}

/// Why the server could not start.
public struct HTTPServerError: Error, Sendable, CustomStringConvertible {
    public let description: String
}
