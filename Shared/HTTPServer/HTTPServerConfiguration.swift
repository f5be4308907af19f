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
    /// byte is read, or once a chunked body that crossed the limit has ended (read and thrown
    /// away; one that goes on past twice the limit, at least 1 MiB, loses its connection).
    public var maxBodyBytes: Int
    /// Bound on the request target plus header fields: a larger head gets 431 `HEADERS_TOO_LARGE`
    /// (it also sizes MHD's per-connection memory pool, twice this: a head beyond even that gets
    /// MHD's own 431).
    public var maxHeaderBytes: Int
    /// Open connections beyond this are refused.
    public var connectionLimit: Int
    /// A connection idle this long (a request head or body trickling in counts as idle between
    /// bytes) is closed; rounded up to whole seconds.
    public var idleTimeout: Duration
    /// How long `shutdown()` waits for running handlers before answering them 503 itself.
    public var shutdownGracePeriod: Duration
    /// Load balancers and proxies: requests they relay are attributed to the client they name in
    /// `X-Forwarded-For` (`HTTPRequestHead.clientAddress`), and their connections are not capped
    /// per address (one of them carries everyone).
    public var trustedProxies: [AddressRange]
    /// Open connections allowed from one address (0: no cap); others beyond it are refused at accept.
    public var maxConnectionsPerAddress: Int
    /// A request head (line and fields) must be complete this long after the connection opened or
    /// the previous answer was sent, however slowly it trickles in; nil: only `idleTimeout`.
    public var requestHeaderTimeout: Duration?

    public init(
        host: String = "0.0.0.0", port: Int = 8080, threadPoolSize: Int = 4, maxBodyBytes: Int = 256 * 1024,
        maxHeaderBytes: Int = 16 * 1024, connectionLimit: Int = 4096, idleTimeout: Duration = .seconds(30),
        shutdownGracePeriod: Duration = .seconds(10), trustedProxies: [AddressRange] = [], maxConnectionsPerAddress: Int = 0,
        requestHeaderTimeout: Duration? = nil
    ) {
        self.host = host
        self.port = port
        self.threadPoolSize = threadPoolSize
        self.maxBodyBytes = maxBodyBytes
        self.maxHeaderBytes = maxHeaderBytes
        self.connectionLimit = connectionLimit
        self.idleTimeout = idleTimeout
        self.shutdownGracePeriod = shutdownGracePeriod
        self.trustedProxies = trustedProxies
        self.maxConnectionsPerAddress = maxConnectionsPerAddress
        self.requestHeaderTimeout = requestHeaderTimeout
    }
}

/// Why the server could not start.
public struct HTTPServerError: Error, Sendable, CustomStringConvertible {
    public let description: String
}
