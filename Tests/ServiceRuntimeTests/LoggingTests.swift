import Foundation
import ServiceRuntime
import Testing

@Suite struct LoggingTests {
    func lines(_ body: (Logger) -> Void) -> [[String: Any]] {
        let sink = LogSink.memory()
        body(Logger(label: "test", level: .trace, sink: sink))
        return sink.lines.map { try! JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any] }
    }

    @Test func writesOneJSONObjectPerLineWithLevelTimeMessageAndMetadata() throws {
        let logged = lines { $0.info("order created", ["order.no": "PAY1", "attempt": 2, "ok": true]) }
        let line = try #require(logged.first)
        #expect(line["level"] as? String == "info")
        #expect(line["message"] as? String == "order created")
        #expect(line["order.no"] as? String == "PAY1")
        #expect(line["attempt"] as? Int == 2)
        #expect(line["ok"] as? Bool == true)
        let time = try #require(line["time"] as? String)
        #expect(RFC3339.date(from: time) != nil)
    }

    @Test func levelsBelowTheLoggersAreDropped() {
        let sink = LogSink.memory()
        let logger = Logger(label: "test", level: .warning, sink: sink)
        logger.info("hidden")
        logger.error("shown")
        #expect(sink.lines.count == 1)
    }

    @Test func secretsAreRedactedByKeyAndByShape() throws {
        let jws = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJlLWJ5dGVz"
        let logged = lines {
            $0.info(
                "request with Bearer abc.def and \(jws)",
                [
                    "authorization": "Bearer secret-token", "user.token": "t", "db.url": "postgresql://u:hunter2@h/db",
                    "payload": .string(jws), "signedPayload": "x", "apple.private_key": "k",
                ])
        }
        let text = String(data: try JSONSerialization.data(withJSONObject: logged[0]), encoding: .utf8)!
        for secret in ["secret-token", "hunter2", jws, "abc.def"] { #expect(!text.contains(secret), "\(secret) leaked") }
        #expect(logged[0]["authorization"] as? String == Redaction.mask)
        #expect(logged[0]["signedPayload"] as? String == Redaction.mask)
        #expect((logged[0]["db.url"] as? String)?.contains("postgresql://u:") == true)
    }

    @Test func controlCharactersAreEscaped() throws {
        let logged = lines { $0.warning("line\nbreak \"quoted\" \u{01}") }
        #expect(logged[0]["message"] as? String == "line\nbreak \"quoted\" \u{01}")
    }
}

@Suite struct MetricsTests {
    @Test func prometheusExposition() {
        let registry = MetricsRegistry()
        let counter = registry.counter("jobs_total", help: "Jobs", labels: ["outcome": "ok"])
        counter.increment(by: 3)
        #expect(registry.counter("jobs_total", help: "Jobs", labels: ["outcome": "ok"]) === counter)
        registry.gauge("queue_depth", help: "Depth").set(7)
        let histogram = registry.histogram("latency_seconds", help: "Latency", buckets: [0.1, 1])
        histogram.observe(0.05)
        histogram.observe(0.5)
        histogram.observe(5)
        let text = registry.prometheusText()
        #expect(text.contains("# TYPE jobs_total counter\njobs_total{outcome=\"ok\"} 3\n"))
        #expect(text.contains("queue_depth 7\n"))
        #expect(text.contains("latency_seconds_bucket{le=\"0.1\"} 1\n"))
        #expect(text.contains("latency_seconds_bucket{le=\"1\"} 2\n"))
        #expect(text.contains("latency_seconds_bucket{le=\"+Inf\"} 3\n"))
        #expect(text.contains("latency_seconds_count 3\n"))
    }

    @Test func labelValuesAreEscaped() {
        let registry = MetricsRegistry()
        registry.counter("odd_total", help: "Odd", labels: ["v": "a\"b\\c\nd"]).increment()
        #expect(registry.prometheusText().contains(#"odd_total{v="a\"b\\c\nd"} 1"#))
    }
}

@Suite struct ConfigurationTests {
    @Test func everyProblemIsReportedAtOnceWithNameValueAndExpectation() {
        let reader = ConfigurationReader(environment: ["PORT": "eighty", "FLAG": "maybe", "BROKERS": "nohost"])
        _ = reader.int("PORT", default: 1, range: 1...65535)
        _ = reader.bool("FLAG", default: false)
        _ = reader.hostPorts("BROKERS")
        _ = reader.requiredString("URL", expected: "a URL")
        #expect(throws: ConfigurationError.self) { try reader.validate() }
        let names = reader.problems.map(\.name)
        #expect(names == ["PORT", "FLAG", "BROKERS", "URL"])
        let text = reader.problems.map(\.description).joined(separator: "\n")
        #expect(text.contains("PORT: invalid value 'eighty'; expected an integer in 1...65535"))
        #expect(text.contains("URL: missing; expected a URL"))
    }

    @Test func secretValuesAreNotEchoed() {
        let reader = ConfigurationReader(environment: ["API_TOKEN_SECRET": "hunter2"])
        reader.report("API_TOKEN_SECRET", "hunter2", "something else")
        #expect(!reader.problems[0].description.contains("hunter2"))
    }

    @Test func defaultsApplyWhenUnset() throws {
        let reader = ConfigurationReader(environment: [:])
        #expect(reader.int("N", default: 12) == 12)
        #expect(reader.oneOf("ENV", ["Sandbox", "Production"], default: "Sandbox") == "Sandbox")
        try reader.validate()
    }

    /// Dates in log lines and answers come from payloads too: one beyond any real range is written
    /// at the bound instead of trapping.
    @Test func timestampsOfAnyDateAreWritten() {
        #expect(RFC3339.string(from: Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00Z")
        for seconds in [TimeInterval.infinity, -.infinity, .nan, 1e300, -1e300] {
            let text = RFC3339.string(from: Date(timeIntervalSince1970: seconds), fractional: true)
            #expect(text.hasSuffix("Z"), "\(seconds): \(text)")
        }
    }
}
