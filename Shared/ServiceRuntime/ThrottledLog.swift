/// A log line for something that may happen on every request or message (a refusal, a failed
/// publish), written at most once per `interval` for each message and reason.
///
/// A flood writes one line per reason every interval instead of one per occurrence (a fuzzing run
/// once wrote 12,060 refusal warnings); each line carries `log.occurrences`, how many times it
/// happened since the previous line of its kind, this one included, so nothing goes uncounted.
/// Occurrences after the last line are reported by the next one; callers keep a metric as well,
/// which counts every occurrence at once.
public final class ThrottledLog: Sendable {
    /// The metadata key of the number of occurrences a line stands for.
    public static let occurrencesKey = "log.occurrences"

    public let logger: Logger
    public let level: LogLevel
    public let interval: Duration
    private let now: @Sendable () -> ContinuousClock.Instant
    private let windows: LogThrottle

    /// `now` is the clock the interval is measured on; tests pass their own to move time by hand.
    public init(
        logger: Logger, level: LogLevel = .warning, interval: Duration = .seconds(10),
        now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }
    ) {
        self.logger = logger
        self.level = level
        self.interval = interval
        self.now = now
        windows = LogThrottle(window: interval)
    }

    /// Counts one occurrence of `message` for `reason` (a bounded set: an error code, a refusal
    /// kind) and writes it with `metadata` when no line of that message and reason went out in
    /// the last `interval`; `metadata` then describes this occurrence, the first of the new window.
    public func record(_ message: String, reason: String, _ metadata: @autoclosure () -> Logger.Metadata = [:]) {
        guard level >= logger.level else { return }
        // The held-back occurrences plus this one; the unit separator cannot occur in a message.
        guard let held = windows.admit(message + "\u{1F}" + reason, now: now()) else { return }
        let occurrences = held + 1
        var extra = metadata()
        extra[Self.occurrencesKey] = .int(Int64(occurrences))
        extra["log.reason"] = .string(reason)
        logger.log(level, message, extra)
    }
}
