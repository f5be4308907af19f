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
}

/// Runs services together; on SIGTERM/SIGINT, or when any of them stops, shuts them down one by
/// one in reverse order, so a service never outlives the ones it depends on (listed before it).
public struct ServiceGroup: Sendable {
    public let services: [any Service]
    public let logger: Logger
    public let signals: [Int32]
    /// How long each service gets to stop before the group stops waiting for it.
    public let gracefulTimeout: Duration

    public init(
        services: [any Service], logger: Logger, signals: [Int32] = [SIGTERM, SIGINT],
        gracefulTimeout: Duration = .seconds(30)
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
        let gracefulTimeout = gracefulTimeout
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

        await withTaskGroup(of: Void.self) { group in
            for (index, service) in services.enumerated() {
                group.addTask {
                    do {
                        try await service.run()
                        logger.info("service stopped", ["service": .string(service.name)])
                    } catch {
                        logger.error(
                            "service failed", ["service": .string(service.name), "error": .string("\(error)")])
                        firstError.withLock { if $0 == nil { $0 = error } }
                    }
                    finished[index].fire()
                    trigger.fire()
                }
            }
            group.addTask {
                await trigger.wait()
                for (index, service) in services.enumerated().reversed() {
                    logger.info("stopping service", ["service": .string(service.name)])
                    await service.shutdown()
                    let stopped = await finished[index].wait(timeout: gracefulTimeout)
                    if !stopped {
                        logger.warning("service did not stop in time", ["service": .string(service.name)])
                    }
                }
            }
            await group.waitForAll()
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
