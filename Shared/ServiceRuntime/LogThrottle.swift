import Synchronization

/// Lets one log line of each kind through per window and counts the ones it holds back: the
/// windows under `ThrottledLog`, and what librdkafka's callbacks use directly (it repeats its
/// connection errors for as long as a broker is away: 15 to 42 lines a second per service were
/// measured, burying everything else in the log). Sendable: the counts are behind a mutex.
public final class LogThrottle: Sendable {
    private struct Entry {
        var windowStart: ContinuousClock.Instant
        var suppressed: Int
    }

    /// The one throttle of the process: every librdkafka client's lines share its windows.
    public static let shared = LogThrottle(window: .seconds(10))

    public let window: Duration
    private let entries = Mutex<[String: Entry]>([:])

    public init(window: Duration) {
        self.window = window
    }

    /// Nil when a line of `kind` was let through within the window (this one is counted instead);
    /// otherwise how many were held back since the last one let through.
    public func admit(_ kind: String, now: ContinuousClock.Instant = .now) -> Int? {
        entries.withLock { entries in
            if var entry = entries[kind], now - entry.windowStart < window {
                entry.suppressed += 1
                entries[kind] = entry
                return nil
            }
            let suppressed = entries[kind]?.suppressed ?? 0
            entries[kind] = Entry(windowStart: now, suppressed: 0)
            return suppressed
        }
    }
}
