import Foundation
import ServiceRuntime
import Synchronization

/// The open connections of a server, for the two limits libmicrohttpd cannot apply as we need
/// them: a cap per source address that spares trusted proxies (MHD's own per-IP limit cannot),
/// and a deadline for each request head however slowly it trickles in (MHD's timeout restarts
/// with every byte, so one byte every few seconds held a connection for ever).
///
/// Fed by MHD's accept policy and connection notifications; the server's timer calls `expire`.
final class ConnectionTable: Sendable {
    private struct Tracked {
        let address: String
        let socket: Int32
        /// When the head being awaited must be complete; nil while a request is being handled.
        var headDeadline: ContinuousClock.Instant?
    }
    private struct State {
        var perAddress: [String: Int] = [:]
        /// Admitted but not yet reported opened, by address: counted against the cap at once, as
        /// MHD's threads accept concurrently and each admits before the previous one is reported
        /// (counting only opened connections let one source hold one more than its cap).
        var admitting: [String: [ContinuousClock.Instant]] = [:]
        var connections: [UInt: Tracked] = [:]
    }

    /// MHD reports an admitted connection opened within microseconds, unless it gave up on it
    /// (out of memory, the global limit reached meanwhile): a reservation older than this is one
    /// that will never be.
    static let admissionLapse = Duration.seconds(5)

    private let state = Mutex(State())
    private let maxPerAddress: Int
    private let exempt: [AddressRange]
    private let headerTimeout: Duration?
    private let logger: Logger
    private let refusals: ThrottledLog
    private let refused = MetricsRegistry.shared.counter(
        "http_server_rejected_connections_total", help: "Connections refused at accept, by reason.",
        labels: ["reason": "per_address_limit"])
    private let headTimeouts = MetricsRegistry.shared.counter(
        "http_server_request_header_timeouts_total", help: "Connections closed because a request head was not complete in time.")

    init(maxPerAddress: Int, exempt: [AddressRange], headerTimeout: Duration?, logger: Logger) {
        self.maxPerAddress = maxPerAddress
        self.exempt = exempt
        self.headerTimeout = headerTimeout
        self.logger = logger
        refusals = ThrottledLog(logger: logger)
    }

    /// The accept policy: false when `address` already holds its maximum (counted, and logged at
    /// most once every 10 s with the number refused meanwhile).
    func admit(_ address: String, now: ContinuousClock.Instant = .now) -> Bool {
        guard maxPerAddress > 0, !ClientAddress.isTrusted(address, exempt) else { return true }
        let admitted = state.withLock { s in
            var pending = s.admitting[address, default: []].filter { now - $0 < Self.admissionLapse }
            let admitted = s.perAddress[address, default: 0] + pending.count < maxPerAddress
            if admitted { pending.append(now) }
            s.admitting[address] = pending.isEmpty ? nil : pending
            return admitted
        }
        if !admitted {
            refused.increment()
            refusals.record(
                "http connections refused: the source holds its maximum", reason: "per_address_limit",
                ["net.peer.address": .string(address), "http.max_connections_per_address": .int(Int64(maxPerAddress))])
        }
        return admitted
    }

    func opened(_ connection: OpaquePointer, address: String, socket: Int32) {
        let deadline = headerTimeout.map { ContinuousClock.now + $0 }
        state.withLock { s in
            if var pending = s.admitting[address] {
                pending.removeFirst()
                s.admitting[address] = pending.isEmpty ? nil : pending
            }
            s.perAddress[address, default: 0] += 1
            s.connections[UInt(bitPattern: connection)] = Tracked(address: address, socket: socket, headDeadline: deadline)
        }
    }

    /// MHD calls this before it closes the socket, so `expire` never touches a reused descriptor.
    func closed(_ connection: OpaquePointer) {
        state.withLock { s in
            guard let tracked = s.connections.removeValue(forKey: UInt(bitPattern: connection)) else { return }
            let left = s.perAddress[tracked.address, default: 1] - 1
            s.perAddress[tracked.address] = left > 0 ? left : nil
        }
    }

    /// A complete head arrived: no deadline while the request is handled.
    func headReceived(_ connection: OpaquePointer) { setDeadline(connection, nil) }

    /// The answer was sent: the next head is due within the timeout.
    func awaitingHead(_ connection: OpaquePointer) { setDeadline(connection, headerTimeout.map { ContinuousClock.now + $0 }) }

    private func setDeadline(_ connection: OpaquePointer, _ deadline: ContinuousClock.Instant?) {
        guard headerTimeout != nil else { return }
        state.withLock { $0.connections[UInt(bitPattern: connection)]?.headDeadline = deadline }
    }

    /// Shuts down the sockets whose head is overdue; MHD then sees the end of the stream and
    /// closes the connection itself (and reports it closed).
    func expire(now: ContinuousClock.Instant = .now) {
        let expired = state.withLock { s -> Int in
            var count = 0
            for (key, tracked) in s.connections {
                guard let deadline = tracked.headDeadline, deadline <= now else { continue }
                _ = Foundation.shutdown(tracked.socket, Int32(SHUT_RDWR))
                s.connections[key]?.headDeadline = nil
                count += 1
            }
            return count
        }
        if expired > 0 {
            headTimeouts.increment(by: expired)
            logger.debug("http connections closed: request head not complete in time", ["http.connections": .int(Int64(expired))])
        }
    }
}
