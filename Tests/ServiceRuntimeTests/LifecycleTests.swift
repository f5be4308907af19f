import ServiceRuntime
import Synchronization
import Testing

/// A service that records when it starts, is asked to stop, and stops.
final class RecordingService: Service {
    let name: String
    let journal: Locked<[String]>
    let stopped = ShutdownTrigger()
    let failure: (any Error)?

    init(_ name: String, journal: Locked<[String]>, failure: (any Error)? = nil) {
        self.name = name
        self.journal = journal
        self.failure = failure
    }

    func run() async throws {
        journal.withLock { $0.append("run \(name)") }
        if let failure { throw failure }
        await stopped.wait()
        journal.withLock { $0.append("stopped \(name)") }
    }

    func shutdown() async {
        journal.withLock { $0.append("shutdown \(name)") }
        stopped.fire()
    }
}

struct Boom: Error {}

/// A service whose stop never completes, as a consumer waiting for a broker that is gone.
final class StuckService: Service {
    let name = "stuck"
    let journal: Locked<[String]>
    init(journal: Locked<[String]>) { self.journal = journal }
    func run() async throws { await ShutdownTrigger().wait() }
    func shutdown() async {
        journal.withLock { $0.append("shutdown stuck") }
        await ShutdownTrigger().wait()
    }
    func shutdownRequested() { journal.withLock { $0.append("requested stuck") } }
}

/// Records the moment it is told a stop was asked for.
final class DrainingService: Service {
    let name = "readiness"
    let journal: Locked<[String]>
    let stopped = ShutdownTrigger()
    init(journal: Locked<[String]>) { self.journal = journal }
    func run() async throws { await stopped.wait() }
    func shutdown() async { stopped.fire() }
    func shutdownRequested() { journal.withLock { $0.append("requested readiness") } }
}

@Suite struct LifecycleTests {
    @Test func aFailingServiceStopsTheOthersInReverseOrderAndTheErrorSurfaces() async throws {
        let journal = Locked<[String]>([])
        let group = ServiceGroup(
            services: [
                RecordingService("db", journal: journal), RecordingService("http", journal: journal),
                RecordingService("bad", journal: journal, failure: Boom()),
            ],
            // A grace no loaded machine spends: this test is about the order, not the time.
            logger: Logger(label: "test", level: .critical), signals: [], gracefulTimeout: .seconds(3600))
        await #expect(throws: Boom.self) { try await group.run() }
        let events = journal.value
        let shutdowns = events.filter { $0.hasPrefix("shutdown") }
        #expect(shutdowns == ["shutdown bad", "shutdown http", "shutdown db"])
        // A service is only asked to stop after the ones that depend on it have stopped.
        let httpStopped = try #require(events.firstIndex(of: "stopped http"), "\(events)")
        let dbAsked = try #require(events.firstIndex(of: "shutdown db"), "\(events)")
        #expect(httpStopped < dbAsked)
    }

    /// Issue 26: a stop takes at most the grace, whatever a service waits for; every service hears
    /// of the stop before the first one is shut down.
    @Test(.timeLimit(.minutes(1))) func aServiceThatCannotStopDoesNotHoldTheProcessPastTheGrace() async throws {
        let journal = Locked<[String]>([])
        // The stuck service is stopped first (the last listed), so whatever the machine's load, the
        // whole grace is spent waiting for it and the services before it are never asked.
        let group = ServiceGroup(
            services: [
                RecordingService("db", journal: journal), DrainingService(journal: journal),
                RecordingService("bad", journal: journal, failure: Boom()), StuckService(journal: journal),
            ],
            logger: Logger(label: "test", level: .critical), signals: [], gracefulTimeout: .milliseconds(300))
        await #expect(throws: Boom.self) { try await group.run() }
        // Its shutdown call runs in a task of its own, which a loaded machine may start late.
        for _ in 0..<600 where !journal.value.contains("shutdown stuck") { try await Task.sleep(for: .milliseconds(100)) }
        let events = journal.value
        #expect(events.contains("shutdown stuck"), "\(events)")
        #expect(!events.contains("shutdown db") && !events.contains("shutdown bad"), "the grace was spent on the stuck service")
        let firstShutdown = try #require(events.firstIndex { $0.hasPrefix("shutdown") })
        #expect(events.firstIndex(of: "requested readiness").map { $0 < firstShutdown } == true, "\(events)")
        #expect(events.firstIndex(of: "requested stuck").map { $0 < firstShutdown } == true, "\(events)")
    }

    @Test func triggerWaitsWithAndWithoutDeadline() async {
        let trigger = ShutdownTrigger()
        #expect(await trigger.wait(timeout: .milliseconds(20)) == false)
        Task { trigger.fire() }
        #expect(await trigger.wait(timeout: .seconds(5)) == true)
        await trigger.wait()
    }
}
