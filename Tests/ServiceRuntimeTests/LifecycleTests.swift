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

@Suite struct LifecycleTests {
    @Test func aFailingServiceStopsTheOthersInReverseOrderAndTheErrorSurfaces() async throws {
        let journal = Locked<[String]>([])
        let group = ServiceGroup(
            services: [
                RecordingService("db", journal: journal), RecordingService("http", journal: journal),
                RecordingService("bad", journal: journal, failure: Boom()),
            ],
            logger: Logger(label: "test", level: .critical), signals: [])
        await #expect(throws: Boom.self) { try await group.run() }
        let events = journal.value
        let shutdowns = events.filter { $0.hasPrefix("shutdown") }
        #expect(shutdowns == ["shutdown bad", "shutdown http", "shutdown db"])
        // A service is only asked to stop after the ones that depend on it have stopped.
        #expect(events.firstIndex(of: "stopped http")! < events.firstIndex(of: "shutdown db")!)
    }

    @Test func triggerWaitsWithAndWithoutDeadline() async {
        let trigger = ShutdownTrigger()
        #expect(await trigger.wait(timeout: .milliseconds(20)) == false)
        Task { trigger.fire() }
        #expect(await trigger.wait(timeout: .seconds(5)) == true)
        await trigger.wait()
    }
}
