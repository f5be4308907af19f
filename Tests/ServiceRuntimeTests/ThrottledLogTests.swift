import Foundation
import ServiceRuntime
import Testing

@Suite struct ThrottledLogTests {
    /// A throttle on a clock the test moves by hand, writing to memory.
    struct Fixture {
        let sink = LogSink.memory()
        let elapsed = Locked(Duration.zero)
        let log: ThrottledLog

        init(level: LogLevel = .info) {
            let start = ContinuousClock.now
            let elapsed = elapsed
            log = ThrottledLog(logger: Logger(label: "test", level: level, sink: sink), now: { start + elapsed.value })
        }

        func advance(_ duration: Duration) { elapsed.withLock { $0 += duration } }

        var lines: [[String: Any]] {
            sink.lines.map { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] ?? [:] }
        }
    }

    @Test func firstOccurrenceIsWrittenAtOnceWithItsMetadata() throws {
        let fixture = Fixture()
        fixture.log.record("request refused", reason: "INVALID_SIGNATURE", ["trace.id": "t1"])
        let line = try #require(fixture.lines.first)
        #expect(fixture.lines.count == 1)
        #expect(line["level"] as? String == "warning")
        #expect(line["message"] as? String == "request refused")
        #expect(line["trace.id"] as? String == "t1")
        #expect(line["log.reason"] as? String == "INVALID_SIGNATURE")
        #expect(line[ThrottledLog.occurrencesKey] as? Int == 1)
    }

    @Test func occurrencesWithinTheIntervalAreCountedAndReportedByTheNextLine() throws {
        let fixture = Fixture()
        fixture.log.record("request refused", reason: "INVALID_SIGNATURE", ["trace.id": "t1"])
        for second in 1...4 {
            fixture.advance(.seconds(2))
            fixture.log.record("request refused", reason: "INVALID_SIGNATURE", ["trace.id": .string("t\(second + 1)")])
        }
        #expect(fixture.lines.count == 1, "8 s after the first line: still quiet")

        fixture.advance(.seconds(2))
        fixture.log.record("request refused", reason: "INVALID_SIGNATURE", ["trace.id": "t6"])
        #expect(fixture.lines.count == 2)
        let line = try #require(fixture.lines.last)
        #expect(line[ThrottledLog.occurrencesKey] as? Int == 5, "four suppressed and this one")
        #expect(line["trace.id"] as? String == "t6")

        // The window starts again from that line.
        fixture.advance(.seconds(9))
        fixture.log.record("request refused", reason: "INVALID_SIGNATURE")
        #expect(fixture.lines.count == 2)
        fixture.advance(.seconds(1))
        fixture.log.record("request refused", reason: "INVALID_SIGNATURE")
        #expect(fixture.lines.count == 3)
        #expect(fixture.lines.last?[ThrottledLog.occurrencesKey] as? Int == 2)
    }

    @Test func eachReasonAndMessageHasItsOwnWindow() {
        let fixture = Fixture()
        fixture.log.record("request refused", reason: "INVALID_SIGNATURE")
        fixture.log.record("request refused", reason: "INVALID_APP")
        fixture.log.record("publish failed", reason: "INVALID_SIGNATURE")
        fixture.log.record("request refused", reason: "INVALID_APP")
        #expect(
            fixture.lines.map { "\($0["message"] ?? ""):\($0["log.reason"] ?? "")" } == [
                "request refused:INVALID_SIGNATURE", "request refused:INVALID_APP", "publish failed:INVALID_SIGNATURE",
            ])
    }

    @Test func nothingIsWrittenBelowTheLoggersLevel() {
        let fixture = Fixture(level: .error)
        fixture.log.record("request refused", reason: "INVALID_SIGNATURE")
        #expect(fixture.sink.lines.isEmpty)
    }
}
