/// Durations as the plain numbers that C APIs, logs and metrics take.
extension Duration {
    /// The duration in seconds, with its fraction.
    public var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }

    /// The duration in whole milliseconds, truncated toward zero.
    public var inMilliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}
