import ServiceRuntime
import Testing

/// librdkafka's repeated lines: one per kind and window, the rest counted.
@Suite struct LogThrottleTests {
    @Test func oneLinePerKindAndWindowCarriesTheCountOfThoseHeldBack() {
        let throttle = LogThrottle(window: .seconds(10))
        let start = ContinuousClock.now
        #expect(throttle.admit("log:FAIL:3", now: start) == 0)
        for second in 1...9 {
            #expect(throttle.admit("log:FAIL:3", now: start + .seconds(second)) == nil)
        }
        // Another kind has a window of its own.
        #expect(throttle.admit("error:-195", now: start + .seconds(5)) == 0)
        #expect(throttle.admit("log:FAIL:3", now: start + .seconds(10)) == 9)
        #expect(throttle.admit("log:FAIL:3", now: start + .seconds(11)) == nil)
        // After a quiet window the next line comes at once, counting only what was held back.
        #expect(throttle.admit("log:FAIL:3", now: start + .seconds(60)) == 1)
    }
}
