import Dispatch
import Foundation
import Synchronization

/// A long-running part of a process (a pool, a server, a consumer loop).
///
/// `run()` returns when the service has stopped; `shutdown()` asks it to stop gracefully
/// (finish in-flight work, release resources) and may be called before or during `run()`.
public protocol Service: Sendable {
    var name: String { get }
    func run() async throws
    func shutdown() async
    /// Called on every service at once as soon as the process is asked to stop, before any
    /// `shutdown()`: the moment to stop looking ready while the others are still serving.
    func shutdownRequested()
}

extension Service {
    public func shutdownRequested() {}
}

/// Runs services together; on SIGTERM/SIGINT, or when any of them stops, shuts them down one by
/// one in reverse order, so a service never outlives the ones it depends on (listed before it).
///
/// The whole stop takes at most `gracefulTimeout`: a service still stopping when it is spent is
/// left behind and `run()` returns, so the process exits whatever a dependency (a broker that is
/// gone) makes a service wait for.
public struct ServiceGroup: Sendable {
    public let services: [any Service]
    public let logger: Logger
    public let signals: [Int32]
    /// How long the services get, all together, to stop once a stop was asked for.
    public let gracefulTimeout: Duration

    public init(
        services: [any Service], logger: Logger, signals: [Int32] = [SIGTERM, SIGINT],
        gracefulTimeout: Duration = .seconds(20)
    ) {
        self.services = services
        self.logger = logger
        self.signals = signals
        self.gracefulTimeout = gracefulTimeout
    }

    /// Runs until a signal arrives or a service stops; rethrows the first service failure.
    public func run() async throws {
        let services = services
        let logger = logger
        let trigger = ShutdownTrigger()
        let signalSources = signals.map { signo -> any DispatchSourceSignal in
            signal(signo, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signo, queue: .global())
            source.setEventHandler { [logger] in
                logger.notice("signal received, shutting down", ["signal": .int(Int64(signo))])
                trigger.fire()
            }
            source.resume()
            return source
        }
        defer { signalSources.forEach { $0.cancel() } }

        let firstError = Locked<(any Error)?>(nil)
        let finished = (0..<services.count).map { _ in ShutdownTrigger() }
        // Unstructured, so a service that cannot stop (blocked in a C call) never holds up the exit.
        for (index, service) in services.enumerated() {
            Task {
                do {
                    try await service.run()
                    logger.info("service stopped", ["service": .string(service.name)])
                } catch {
                    logger.error("service failed", ["service": .string(service.name), "error": .string("\(error)")])
                    firstError.withLock { if $0 == nil { $0 = error } }
                }
                finished[index].fire()
                trigger.fire()
            }
        }

        await trigger.wait()
        let deadline = ContinuousClock.now + gracefulTimeout
        for service in services { service.shutdownRequested() }
        for (index, service) in services.enumerated().reversed() {
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else { break }
            logger.info("stopping service", ["service": .string(service.name)])
            // `shutdown()` itself may wait on the dependency that is gone: it is waited for only
            // as long as the grace lasts.
            let shutDown = ShutdownTrigger()
            Task {
                await service.shutdown()
                shutDown.fire()
            }
            var stopped = await shutDown.wait(timeout: remaining)
            if stopped { stopped = await finished[index].wait(timeout: deadline - ContinuousClock.now) }
            if !stopped {
                logger.warning("service did not stop in time", ["service": .string(service.name)])
            }
        }
        let left = services.indices.filter { !finished[$0].isFired }.map { services[$0].name }
        if !left.isEmpty {
            logger.warning(
                "shutdown grace spent; exiting with services still stopping",
                ["services": .string(left.joined(separator: ",")), "grace_seconds": .int(gracefulTimeout.inMilliseconds / 1000)])
        }
        if let error = firstError.withLock({ $0 }) { throw error }
    }
}

/// A one-shot event that any number of tasks can await, with or without a deadline.
public final class ShutdownTrigger: Sendable {
    private struct State {
        var fired = false
        var nextID = 0
        var waiters: [Int: CheckedContinuation<Bool, Never>] = [:]
    }
    private let state = Mutex(State())

    public init() {}

    public var isFired: Bool { state.withLock { $0.fired } }

    public func fire() {
        let waiters = state.withLock { s -> [CheckedContinuation<Bool, Never>] in
            guard !s.fired else { return [] }
            s.fired = true
            defer { s.waiters = [:] }
            return Array(s.waiters.values)
        }
        waiters.forEach { $0.resume(returning: true) }
    }

    public func wait() async { _ = await wait(timeout: nil) }

    /// Waits at most `timeout` (forever when nil); true when the event fired.
    public func wait(timeout: Duration?) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let id = state.withLock { s -> Int? in
                if s.fired { return nil }
                s.nextID += 1
                s.waiters[s.nextID] = continuation
                return s.nextID
            }
            guard let id else { return continuation.resume(returning: true) }
            guard let timeout else { return }
            Task {
                try? await Task.sleep(for: timeout)
                let timedOut = self.state.withLock { $0.waiters.removeValue(forKey: id) }
                timedOut?.resume(returning: false)
            }
        }
    }
}
