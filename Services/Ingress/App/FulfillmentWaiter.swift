import Events
import Postgres
import ServiceRuntime
import Synchronization

/// Lets a request wait (bounded) for the worker that processes its event.
///
/// One LISTEN connection per ingress process receives the notifications of `EventCompletion`
/// (`<kind>:<eventId>` on its channel, sent by a worker after its transaction commits) and wakes the requests
/// registered for that key. Register before checking the database, so a notification that
/// arrives between the check and the wait is never missed.
final class FulfillmentWaiter: Service {
    let name = "fulfillment-waiter"
    private let pool: PostgresPool
    private let logger: Logger
    private enum Ticket {
        case registered
        case notified
        case waiting(CheckedContinuation<Bool, Never>)
    }
    private struct State {
        var nextID = 0
        var tickets: [String: [Int: Ticket]] = [:]
        var listener: PostgresListener?
        var stopped = false
    }
    private let state = Mutex(State())

    init(pool: PostgresPool, logger: Logger) {
        self.pool = pool
        self.logger = logger
    }

    func run() async throws {
        while !state.withLock({ $0.stopped }) {
            do {
                let listener = try await pool.listen(EventCompletion.channel)
                let stopped = state.withLock { s -> Bool in
                    s.listener = listener
                    return s.stopped
                }
                if stopped { listener.close() }
                for await notification in listener { wake(notification.payload) }
            } catch {
                // PostgreSQL down: waiting requests simply time out into FULFILLMENT_PENDING.
                logger.warning("fulfillment listener unavailable", ["error": .string("\(error)")])
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    func shutdown() async {
        let listener = state.withLock { s -> PostgresListener? in
            s.stopped = true
            return s.listener
        }
        listener?.close()
    }

    /// A ticket for `key`; wait on it after checking the database.
    func register(_ key: String) -> Int {
        state.withLock { s in
            s.nextID += 1
            s.tickets[key, default: [:]][s.nextID] = .registered
            return s.nextID
        }
    }

    /// Waits until `key` is notified (also before this call, since `register`) or `timeout`
    /// passes; true when notified. The ticket is used up either way.
    func wait(_ key: String, ticket: Int, timeout: Duration) async -> Bool {
        let notified = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let already = state.withLock { s -> Bool? in
                switch s.tickets[key]?[ticket] {
                case .notified: return true
                case .registered:
                    s.tickets[key]![ticket] = .waiting(continuation)
                    return nil
                case .waiting, nil: return false
                }
            }
            if let already { return continuation.resume(returning: already) }
            Task {
                try? await Task.sleep(for: timeout)
                self.finish(key, ticket: ticket, notified: false)
            }
        }
        finish(key, ticket: ticket, notified: notified)
        return notified
    }

    /// Forgets a ticket that will not be waited on.
    func cancel(_ key: String, ticket: Int) { finish(key, ticket: ticket, notified: false) }

    private func finish(_ key: String, ticket: Int, notified: Bool) {
        let continuation = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            let removed = s.tickets[key]?.removeValue(forKey: ticket)
            if s.tickets[key]?.isEmpty == true { s.tickets[key] = nil }
            if case .waiting(let c) = removed { return c }
            return nil
        }
        continuation?.resume(returning: notified)
    }

    private func wake(_ key: String) {
        let continuations = state.withLock { s -> [CheckedContinuation<Bool, Never>] in
            guard let tickets = s.tickets[key] else { return [] }
            var waiting: [CheckedContinuation<Bool, Never>] = []
            for (id, ticket) in tickets {
                switch ticket {
                case .registered: s.tickets[key]![id] = .notified
                case .waiting(let c):
                    waiting.append(c)
                    s.tickets[key]![id] = .notified
                case .notified: break
                }
            }
            return waiting
        }
        continuations.forEach { $0.resume(returning: true) }
    }
}
