import CMicroHTTPD
import CShims
import Dispatch
import Foundation
import ServiceRuntime
import Synchronization

/// An HTTP/1.1 server on libmicrohttpd that runs async handlers through a `Router`.
///
/// A complete request's handler starts on the MHD thread that parsed it (`Task.immediate`) and
/// keeps that thread only until its first suspension; from then on the connection is suspended
/// and the handler continues on the Swift concurrency pool, so a slow handler never holds an
/// event-loop thread. (Handlers must not block, as any async code; long CPU work before their
/// first `await` delays the other connections of that thread.)
/// `shutdown()` stops accepting at once, lets running handlers finish for the grace period,
/// answers the stragglers 503, then stops the daemon. Until then the daemon keeps the server
/// alive, so a started server must be shut down (a `ServiceGroup` does it).
public final class HTTPServer: Service, Sendable {
    private let core: ServerCore

    /// `admission` runs on the request head before any body byte is read; returning a response
    /// rejects the request at once (used for 413/415/429 decisions by apps).
    public init<Context>(
        configuration: HTTPServerConfiguration, router: Router<Context>, logger: Logger,
        admission: (@Sendable (HTTPRequestHead) -> HTTPResponse?)? = nil
    ) {
        var router = router
        if router.logger == nil { router.logger = logger }
        core = ServerCore(
            configuration: configuration, responder: { [router] in await router.dispatch($0) }, logger: logger,
            admission: admission)
    }

    public var name: String { "http" }

    /// The bound port once started (0 before).
    public var port: Int { core.state.withLock { $0.port } }

    /// Binds and starts serving; does nothing when already started or shut down.
    public func start() throws(HTTPServerError) { try core.start() }

    /// Starts if needed, then returns once `shutdown()` has finished.
    public func run() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            // Binding and spawning MHD's threads block; keep them off the cooperative pool.
            DispatchQueue.global().async { [core] in continuation.resume(with: Result { try core.start() }) }
        }
        await core.stopped.wait()
    }

    public func shutdown() async { await core.shutdown() }
}

/// Server state shared with MHD's threads and the handler Tasks.
///
/// `@unchecked Sendable`: every mutable field is inside `state` (a Mutex) or an Atomic; the
/// daemon pointer is only used under the lock or by the single task that won the right to stop it.
final class ServerCore: @unchecked Sendable {
    enum Phase { case idle, running, draining, closing, stopped }

    struct State {
        var phase = Phase.idle
        var daemon: OpaquePointer?
        var port = 0
        /// Requests from the start of their handler until MHD has written their response.
        var inFlight: [ObjectIdentifier: ConnectionRequest] = [:]
        /// Fired when `inFlight` becomes empty, for a shutdown waiting on it.
        var drainWaiter: ShutdownTrigger?
        /// Closes connections whose request head is overdue, while the daemon runs.
        var headTimer: (any DispatchSourceTimer)?
    }

    let configuration: HTTPServerConfiguration
    /// The router's dispatch, whatever its context type.
    let responder: @Sendable (HTTPRequest) async -> (response: HTTPResponse, route: RouteMetrics)
    let logger: Logger
    let admission: (@Sendable (HTTPRequestHead) -> HTTPResponse?)?
    let state = Mutex(State())
    /// Lock-free copies of "the daemon has started" and "phase is past running" for MHD's threads
    /// (start() holds the lock while MHD may call back to log).
    let serving = Atomic<Bool>(false)
    let stopping = Atomic<Bool>(false)
    let stopped = ShutdownTrigger()
    /// Per-address counts and request-head deadlines of the open connections.
    let connections: ConnectionTable

    let activeRequests = MetricsRegistry.shared.gauge(
        "http_server_active_requests", help: "Requests whose handler is running.")
    let rejectedTooLarge = ServerCore.rejected("payload_too_large")
    let rejectedByAdmission = ServerCore.rejected("admission")
    let rejectedShuttingDown = ServerCore.rejected("shutting_down")
    let rejectedMalformed = ServerCore.rejected("malformed")

    static let shuttingDown = HTTPError(status: 503, code: "SHUTTING_DOWN", message: "the server is shutting down")

    static func rejected(_ reason: String) -> Counter {
        MetricsRegistry.shared.counter(
            "http_server_rejected_requests_total", help: "Requests answered without running a handler, by reason.",
            labels: ["reason": reason])
    }

    init(
        configuration: HTTPServerConfiguration,
        responder: @escaping @Sendable (HTTPRequest) async -> (response: HTTPResponse, route: RouteMetrics), logger: Logger,
        admission: (@Sendable (HTTPRequestHead) -> HTTPResponse?)?
    ) {
        self.configuration = configuration
        self.responder = responder
        self.logger = logger
        self.admission = admission
        connections = ConnectionTable(
            maxPerAddress: configuration.maxConnectionsPerAddress, exempt: configuration.trustedProxies,
            headerTimeout: configuration.requestHeaderTimeout, logger: logger)
    }

    // MARK: Lifecycle

    func start() throws(HTTPServerError) {
        try state.withLock { (s: inout State) throws(HTTPServerError) in
            guard s.phase == .idle else { return }
            let (daemon, port) = try startDaemon()
            s.daemon = daemon
            s.port = port
            s.phase = .running
            serving.store(true, ordering: .relaxed)
            s.headTimer = makeHeadTimer()
            logger.info(
                "http server listening", ["http.host": .string(configuration.host), "http.port": .int(Int64(port))])
        }
    }

    /// Checks the request-head deadlines four times per timeout (at most once a second).
    private func makeHeadTimer() -> (any DispatchSourceTimer)? {
        guard let timeout = configuration.requestHeaderTimeout else { return nil }
        let period = min(timeout / 4, .seconds(1))
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now(), repeating: .milliseconds(Int(period.inMilliseconds)))
        timer.setEventHandler { [connections] in connections.expire() }
        timer.resume()
        return timer
    }

    private func startDaemon() throws(HTTPServerError) -> (OpaquePointer, Int) {
        let config = configuration
        guard (1...65535).contains(config.port) || config.port == 0 else {
            throw HTTPServerError(description: "invalid port \(config.port)")
        }
        guard var address = SocketAddress(host: config.host, port: UInt16(config.port)) else {
            throw HTTPServerError(description: "invalid listen host '\(config.host)': expected a numeric IP address")
        }
        let library = String(cString: MHD_get_version())
        guard Self.parsesStrictly(libraryVersion: library) else {
            throw HTTPServerError(
                description:
                    "libmicrohttpd \(library) is loaded; the server needs 1.0 or later (deploy/local/env.sh puts the one install.sh builds on LD_LIBRARY_PATH)"
            )
        }
        // MHD calls back with this pointer; the retain is balanced after MHD_stop_daemon.
        let cls = Unmanaged.passRetained(self).toOpaque()
        var flags =
            MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ERROR_LOG.rawValue
        if address.isIPv6 { flags |= MHD_USE_IPv6.rawValue }
        let idleSeconds = max(
            1,
            Int(
                (config.idleTimeout.inSeconds).rounded(.up)))
        let daemon = address.withSockaddr { sockaddr in
            var options = [
                // First, so that MHD reports even problems with the options after it through us.
                MHD_OptionItem(
                    option: .EXTERNAL_LOGGER, value: unsafeBitCast(daemonLog, to: Int.self), ptr_value: cls),
                MHD_OptionItem(option: .SOCK_ADDR, value: 0, ptr_value: sockaddr),
                MHD_OptionItem(option: .THREAD_POOL_SIZE, value: max(1, config.threadPoolSize), ptr_value: nil),
                MHD_OptionItem(option: .CONNECTION_LIMIT, value: max(1, config.connectionLimit), ptr_value: nil),
                MHD_OptionItem(option: .CONNECTION_TIMEOUT, value: idleSeconds, ptr_value: nil),
                MHD_OptionItem(option: .CLIENT_DISCIPLINE_LVL, value: Self.clientDiscipline, ptr_value: nil),
                // The pool holds the head being parsed plus MHD's bookkeeping and the reply head.
                // Twice the head limit: a head over the limit but within the pool reaches `begin`
                // and gets our JSON 431; only a larger one gets MHD's own answer (431 and the
                // connection closed, written before any callback could run; its body is our JSON
                // shape by the patch deploy/local/libmicrohttpd-patches/json-error-bodies.patch).
                MHD_OptionItem(
                    option: .CONNECTION_MEMORY_LIMIT, value: 2 * max(4096, config.maxHeaderBytes) + 8192,
                    ptr_value: nil),
                MHD_OptionItem(
                    option: .NOTIFY_COMPLETED, value: unsafeBitCast(requestCompleted, to: Int.self),
                    ptr_value: cls),
                MHD_OptionItem(
                    option: .NOTIFY_CONNECTION, value: unsafeBitCast(connectionChanged, to: Int.self),
                    ptr_value: cls),
                // Leave URL and query escapes alone: the router decodes path segments one by one.
                MHD_OptionItem(
                    option: .UNESCAPE_CALLBACK, value: unsafeBitCast(keepEscapes, to: Int.self),
                    ptr_value: nil),
                MHD_OptionItem(option: .END, value: 0, ptr_value: nil),
            ]
            return cshims_mhd_start_daemon(flags, 0, acceptPolicy, cls, accessHandler, cls, &options)
        }
        guard let daemon else {
            Unmanaged<ServerCore>.fromOpaque(cls).release()
            throw HTTPServerError(
                description: "cannot listen on \(config.host):\(config.port) (the reason is logged just before)")
        }
        let port = cshims_mhd_get_daemon_info(daemon, .DAEMON_INFO_BIND_PORT).map { Int($0.pointee.port) }
        return (daemon, port ?? config.port)
    }

    /// How strictly MHD parses requests. A request it refuses is answered 400 (or 413, 414, 431)
    /// and its connection closed, by MHD itself, before any callback (in our JSON error shape, by
    /// our patch of the library): a bare LF line end, a folded
    /// header line, a NUL or bare CR in a field, whitespace before a field's colon, a negative or
    /// malformed Content-Length. 2 is "stricter than the RFCs allow servers, compatible with
    /// clients that follow their MUSTs"; 1.0.1's 3 differs from 2 only in *accepting* whitespace
    /// before a chunk extension's `;` (BWS, which senders must not generate: a known way for two
    /// parsers to read one body differently), so 2 is the strictest in effect.
    static let clientDiscipline = 2

    /// Whether the libmicrohttpd loaded has client discipline levels and answers each malformed
    /// request once (0.9.75, bookworm's, has neither: it would refuse the option and not start).
    static func parsesStrictly(libraryVersion: String) -> Bool {
        let parts = libraryVersion.split(separator: ".").map { Int($0) ?? 0 }
        return (parts.first ?? 0) >= 1
    }

    func shutdown() async {
        enum Step {
            case stop(OpaquePointer)
            case wait, done
        }
        let step = state.withLock { s -> Step in
            switch s.phase {
            case .idle:
                s.phase = .stopped
                return .done
            case .running:
                s.phase = .draining
                return .stop(s.daemon!)
            case .draining, .closing, .stopped:
                return .wait
            }
        }
        guard case .stop(let daemon) = step else {
            if case .done = step { stopped.fire() }
            return await stopped.wait()
        }
        stopping.store(true, ordering: .relaxed)
        logger.info("http server draining", ["http.port": .int(Int64(state.withLock { $0.port }))])

        let listenSocket = MHD_quiesce_daemon(daemon)
        // MHD stops polling the socket but leaves it listening, so the kernel would still complete
        // handshakes nobody serves; shutting it down makes new connections fail fast instead.
        if listenSocket >= 0 { _ = Foundation.shutdown(listenSocket, Int32(SHUT_RDWR)) }

        let drained = await requestsFinished(within: configuration.shutdownGracePeriod)
        // From here on nothing is admitted, in the same lock as the look at what is in flight: a
        // keep-alive connection may send a request after the drain, and MHD aborts the process
        // when stopped with a suspended connection (seen once under a stream of notifications).
        let stragglers = state.withLock { s in
            s.phase = .closing
            s.headTimer?.cancel()
            s.headTimer = nil
            return Array(s.inFlight.values)
        }
        if !stragglers.isEmpty {
            logger.warning(
                drained ? "http requests arrived after the drain" : "http handlers still running at the end of the grace period",
                ["http.requests": .int(Int64(stragglers.count))])
            for context in stragglers {
                let response = ServerCore.shuttingDown.response(traceID: context.head.traceID)
                finish(context, response, route: .unmatched, cancel: true)
            }
            // MHD writes those answers and resumes their connections before it may be stopped.
            if !(await requestsFinished(within: .seconds(10))) {
                logger.error("http requests still suspended after their shutdown answers")
            }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            // MHD_stop_daemon joins MHD's threads: not on the cooperative pool.
            DispatchQueue.global().async {
                // Taken out of the lock first: MHD's threads may be waiting for it in a callback.
                let daemon = self.state.withLock { s in
                    defer { s.daemon = nil }
                    return s.daemon
                }
                daemon.map(MHD_stop_daemon)
                continuation.resume()
            }
        }
        if listenSocket >= 0 { close(listenSocket) }
        state.withLock { $0.phase = .stopped }
        Unmanaged.passUnretained(self).release()
        logger.info("http server stopped")
        stopped.fire()
    }

    /// Waits until every request that reached its handler has been answered and written.
    private func requestsFinished(within timeout: Duration) async -> Bool {
        let waiter = state.withLock { s -> ShutdownTrigger? in
            guard !s.inFlight.isEmpty else { return nil }
            let waiter = s.drainWaiter ?? ShutdownTrigger()
            s.drainWaiter = waiter
            return waiter
        }
        guard let waiter else { return true }
        return await waiter.wait(timeout: timeout)
    }

    // MARK: Requests (called on MHD threads)

    /// First call for a request: the head is complete and no body byte has been read yet.
    func begin(_ connection: OpaquePointer, url: String, method: String, version: String) -> ConnectionRequest {
        connections.headReceived(connection)
        let (head, fields) = readHead(connection, url: RequestPath.normalized(url), method: method)
        let context = ConnectionRequest(head: head, connection: connection)
        let length = context.head.headers["content-length"].flatMap { Int($0) } ?? 0
        if fields.headBytes + url.utf8.count > configuration.maxHeaderBytes {
            rejectedMalformed.increment()
            context.early = HTTPError(
                status: 431, code: "HEADERS_TOO_LARGE",
                message: "the request head exceeds \(configuration.maxHeaderBytes) bytes",
                headers: [("Connection", "close")]
            ).response(traceID: head.traceID)
        } else if let problem = Self.framingProblem(head.headers, version: version) {
            rejectedMalformed.increment()
            context.early = HTTPError(
                status: 400, code: "MALFORMED_REQUEST", message: problem, headers: [("Connection", "close")]
            ).response(traceID: head.traceID)
        } else if fields.repeatedQuery {
            rejectedMalformed.increment()
            context.early = HTTPError(
                status: 400, code: "INVALID_REQUEST", message: "a query argument is given more than once"
            ).response(traceID: head.traceID)
        } else if length > configuration.maxBodyBytes {
            rejectedTooLarge.increment()
            context.early = tooLarge(context)
        } else if let admission, let rejection = admission(context.head) {
            rejectedByAdmission.increment()
            context.early = rejection
        } else {
            context.body.reserveCapacity(length)
        }
        return context
    }

    /// Why a request's framing is ambiguous, or nil. Two parsers in a chain (a load balancer and
    /// us) must never read one request as two, so anything they could read differently is
    /// refused and the connection closed: repeated or non-numeric Content-Length (MHD takes the
    /// first and would parse the rest of the body as a new request), Content-Length beside
    /// Transfer-Encoding, a transfer coding other than one `chunked`, HTTP/1.1 without exactly one
    /// Host. (libmicrohttpd refuses some of these itself, before any callback; the checks stay
    /// here so that the answer is ours, in JSON, wherever it lets a request through.)
    static func framingProblem(_ headers: [String: String], version: String) -> String? {
        let length = headers["content-length"]
        let coding = headers["transfer-encoding"]
        if let length, length.isEmpty || !length.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            return "Content-Length must be one decimal number"
        }
        if length != nil, coding != nil { return "Content-Length and Transfer-Encoding must not both be sent" }
        if let coding, coding.lowercased() != "chunked" { return "the only transfer coding accepted is one chunked" }
        if version == "HTTP/1.1" {
            guard let host = headers["host"], !host.isEmpty, !host.contains(",") else {
                return "an HTTP/1.1 request needs exactly one Host"
            }
        }
        return nil
    }

    /// Every later call: body bytes, then the end of the request, then (after resume) the answer.
    func proceed(_ context: ConnectionRequest, uploadData: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>)
        -> MHD_Result
    {
        switch context.phase {
        case .receiving:
            let count = uploadSize.pointee
            if count > 0, let uploadData {
                if context.discarded > 0 || context.body.count + count > configuration.maxBodyBytes {
                    // A chunked body crossing the limit: MHD takes no answer in the middle of a body,
                    // so the rest is read and thrown away, then answered 413. Up to the limit
                    // again (at least 1 MiB); a sender that keeps going past that loses the connection.
                    if context.discarded == 0 {
                        rejectedTooLarge.increment()
                        context.body = []
                    }
                    context.discarded += count
                    guard context.discarded <= max(configuration.maxBodyBytes, 1 << 20) else {
                        logger.debug(
                            "http request body far over the limit, connection dropped",
                            ["trace.id": .string(context.head.traceID)])
                        return .NO
                    }
                    uploadSize.pointee = 0
                    return .YES
                }
                uploadData.withMemoryRebound(to: UInt8.self, capacity: count) {
                    context.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: count))
                }
                uploadSize.pointee = 0
                return .YES
            }
            if context.discarded > 0 {
                var response = tooLarge(context)
                response.headers.append(("Connection", "close"))
                return queue(response, for: context, route: .unmatched)
            }
            return dispatch(context)
        case .handling:
            guard let (response, route) = context.result() else { return .YES }
            return queue(response, for: context, route: route)
        case .done:
            return .YES
        }
    }

    func respondEarly(_ context: ConnectionRequest) -> MHD_Result {
        queue(context.early!, for: context, route: .unmatched)
    }

    private func dispatch(_ context: ConnectionRequest) -> MHD_Result {
        let admitted = state.withLock { s in
            guard s.phase == .running || s.phase == .draining else { return false }
            s.inFlight[ObjectIdentifier(context)] = context
            return true
        }
        guard admitted else {
            rejectedShuttingDown.increment()
            return queue(ServerCore.shuttingDown.response(traceID: context.head.traceID), for: context, route: .unmatched)
        }
        context.phase = .handling
        activeRequests.add(1)
        let request = HTTPRequest(head: context.head, body: context.body)
        context.body = []
        let responder = responder
        // The handler starts right here and keeps this thread only until its first suspension:
        // a handler that never suspends is answered without a thread hop or an MHD suspend.
        let task = Task.immediate {
            let (response, route) = await responder(request)
            self.finish(context, response, route: route, cancel: false)
        }
        guard let (response, route) = context.suspendUnlessCompleted(task) else { return .YES }
        return queue(response, for: context, route: route)
    }

    /// Hands a result to a request, resuming its connection if it was suspended; only the first
    /// result counts (a handler finishing after shutdown already answered 503 is ignored).
    private func finish(_ context: ConnectionRequest, _ response: HTTPResponse, route: RouteMetrics, cancel: Bool) {
        guard let suspended = context.complete(response, route: route, cancel: cancel) else { return }
        activeRequests.add(-1)
        if suspended { MHD_resume_connection(context.connection) }
    }

    /// MHD is done with a request (answered and written, or the connection failed).
    func completed(_ context: ConnectionRequest) {
        connections.awaitingHead(context.connection)
        state.withLock { s in
            guard s.inFlight.removeValue(forKey: ObjectIdentifier(context)) != nil, s.inFlight.isEmpty else { return }
            s.drainWaiter?.fire()
            s.drainWaiter = nil
        }
    }

    private func queue(_ response: HTTPResponse, for context: ConnectionRequest, route: RouteMetrics) -> MHD_Result {
        context.phase = .done
        var headers = response.headers
        headers.append(("X-Request-Id", context.head.traceID))
        if stopping.load(ordering: .relaxed) { headers.append(("Connection", "close")) }
        let reply = response.body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(
                bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
        }
        guard let reply else { return .NO }
        defer { MHD_destroy_response(reply) }
        for (name, value) in headers where MHD_add_response_header(reply, name, value) != .YES {
            logger.warning("http response header rejected", ["http.header": .string(name)])
        }
        let result = MHD_queue_response(context.connection, UInt32(clamping: response.status), reply)
        route.observe(status: response.status, since: context.started)
        if logger.level <= .debug {
            let elapsed = ContinuousClock.now - context.started
            logger.debug(
                "http request",
                [
                    "http.method": .string(context.head.method), "http.path": .string(context.head.path),
                    "http.route": .string(route.route), "http.status": .int(Int64(response.status)),
                    "http.duration_ms": .double(elapsed.inSeconds * 1000),
                    "net.peer.address": .string(context.head.remoteAddress), "trace.id": .string(context.head.traceID),
                ])
        }
        return result
    }

    private func tooLarge(_ context: ConnectionRequest) -> HTTPResponse {
        HTTPError(
            status: 413, code: "PAYLOAD_TOO_LARGE", message: "the request body exceeds \(configuration.maxBodyBytes) bytes"
        ).response(traceID: context.head.traceID)
    }

    private func readHead(_ connection: OpaquePointer, url: String, method: String) -> (HTTPRequestHead, HeadFields) {
        var fields = HeadFields()
        withUnsafeMutablePointer(to: &fields) { pointer in
            _ = MHD_get_connection_values(connection, .HEADER_KIND, collectField, pointer)
            _ = MHD_get_connection_values(connection, .GET_ARGUMENT_KIND, collectField, pointer)
        }
        let peer =
            cshims_mhd_get_connection_info(connection, .CONNECTION_INFO_CLIENT_ADDRESS)
            .flatMap { $0.pointee.client_addr }.map(SocketAddress.describe) ?? ""
        let client = ClientAddress.resolve(
            peer: peer, forwardedFor: fields.headers["x-forwarded-for"], trustedProxies: configuration.trustedProxies)
        let head = HTTPRequestHead(
            method: method, path: url, query: fields.query, headers: fields.headers, remoteAddress: peer,
            clientAddress: client, traceID: TraceID.accept(fields.headers["x-request-id"]))
        return (head, fields)
    }

    /// MHD reports both why it cannot start and every malformed request or dropped client; only
    /// the former (and hitting the connection limit) deserve an operator's attention.
    func logDaemonMessage(_ message: String) {
        let level: LogLevel =
            !serving.load(ordering: .relaxed) ? .error : message.contains("limit") ? .warning : .debug
        logger.log(level, "libmicrohttpd", ["mhd.message": .string(message)])
    }
}

/// One request's progress, retained by MHD through `*con_cls` until MHD reports it completed.
///
/// `@unchecked Sendable`: `phase`, `body` and `early` are only touched from MHD's callbacks for
/// this connection, which MHD never runs concurrently; the handler Task and `shutdown()` share
/// only `slot`, behind its Mutex. `connection` stays valid while the request is suspended, the
/// only time other threads use it (to resume it, once, guarded by `slot`).
final class ConnectionRequest: @unchecked Sendable {
    enum Phase { case receiving, handling, done }
    private struct Slot {
        var result: (HTTPResponse, RouteMetrics)?
        var completed = false
        var suspended = false
        var task: Task<Void, Never>?
    }

    let head: HTTPRequestHead
    let connection: OpaquePointer
    let started = ContinuousClock.now
    var phase = Phase.receiving
    var body: [UInt8] = []
    /// Body bytes read and thrown away once the body crossed the limit.
    var discarded = 0
    /// A rejection decided from the head alone, sent on the first callback.
    var early: HTTPResponse?
    private let slot = Mutex(Slot())

    init(head: HTTPRequestHead, connection: OpaquePointer) {
        self.head = head
        self.connection = connection
    }

    /// On the MHD thread once the handler has started: its result if it already finished, else
    /// nil with the connection suspended. Suspending under the lock guarantees that whoever
    /// completes the request later sees `suspended` and resumes it, never before the suspend.
    func suspendUnlessCompleted(_ task: Task<Void, Never>) -> (HTTPResponse, RouteMetrics)? {
        slot.withLock { s in
            s.task = task
            if s.completed { return s.result.take() }
            s.suspended = true
            MHD_suspend_connection(connection)
            return nil
        }
    }

    /// Stores the first result: nil when one was already stored, else whether the connection is
    /// suspended (and so must be resumed by the caller).
    func complete(_ response: HTTPResponse, route: RouteMetrics, cancel: Bool) -> Bool? {
        let (outcome, task) = slot.withLock { s -> (Bool?, Task<Void, Never>?) in
            guard !s.completed else { return (nil, nil) }
            s.completed = true
            s.result = (response, route)
            return (s.suspended, s.task)
        }
        if cancel { task?.cancel() }
        return outcome
    }

    /// The stored result, taken once the connection has been resumed.
    func result() -> (HTTPResponse, RouteMetrics)? { slot.withLock { $0.result.take() } }
}
