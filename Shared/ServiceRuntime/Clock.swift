import Foundation
import Synchronization

/// The source of "now" for every time rule, injectable so tests can move time without sleeping.
public protocol WallClock: Sendable {
    func now() -> Date
}

/// The real clock.
public struct SystemClock: WallClock {
    public init() {}
    public func now() -> Date { Date() }
}

/// A clock that tests set and advance by hand.
public final class ManualClock: WallClock {
    private let current: Mutex<Date>
    public init(_ start: Date) { current = Mutex(start) }
    public func now() -> Date { current.withLock { $0 } }
    public func set(_ date: Date) { current.withLock { $0 = date } }
    public func advance(by seconds: TimeInterval) { current.withLock { $0 += seconds } }
}

/// A value guarded by a lock, shareable across tasks (a class, so closures capture a reference).
public final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    public init(_ value: Value) { mutex = Mutex(value) }
    public func withLock<R: Sendable>(_ body: (inout sending Value) throws -> sending R) rethrows -> sending R {
        try mutex.withLock(body)
    }
    public var value: Value { mutex.withLock { $0 } }
}
