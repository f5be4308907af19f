import Foundation
import ServiceRuntime

/// Fault injection for tests (scenario 30): the worker kills itself with SIGKILL when it reaches
/// the named write point of an event's processing, once per marker file, so a crash can be placed
/// exactly where a real one would hurt most. Never set in production.
///
/// `FULFILLMENT_CRASH_POINT=<point>` names the point; `FULFILLMENT_CRASH_MARKER=<path>` (required
/// with it) is a file created just before the kill: a worker restarted with the same settings sees
/// it and runs on, as the restarted process of a real crash would.
public struct CrashPoint: Sendable, Equatable {
    /// The write points of one event, in the order the processing reaches them.
    public enum Point: String, Sendable, CaseIterable {
        /// The lease is committed; nothing else is written.
        case claimed
        /// Inside the transaction: the event row and the chain are locked, nothing is written yet.
        case locked
        /// Inside the transaction: the facts and the rows the rules read are loaded, nothing is written yet.
        case loaded
        /// Inside the transaction: facts, order, subscription, history, grants and SUCCEEDED are
        /// written but not committed.
        case written
        /// Committed: the ingress has not been woken and the Kafka offset is not stored.
        case committed
    }

    public var point: Point
    public var markerPath: String

    public init(point: Point, markerPath: String) {
        self.point = point
        self.markerPath = markerPath
    }

    /// Reads the two settings; nil when no crash point is set. A point without a marker, or an
    /// unknown point, is a configuration problem.
    static func read(from reader: ConfigurationReader) -> CrashPoint? {
        guard let raw = reader.optionalString("FULFILLMENT_CRASH_POINT"), !raw.isEmpty else { return nil }
        guard let point = Point(rawValue: raw) else {
            reader.report(
                "FULFILLMENT_CRASH_POINT", raw, "one of " + Point.allCases.map(\.rawValue).joined(separator: ", "))
            return nil
        }
        guard let marker = reader.optionalString("FULFILLMENT_CRASH_MARKER"), !marker.isEmpty else {
            reader.report("FULFILLMENT_CRASH_MARKER", nil, "a file path, required with FULFILLMENT_CRASH_POINT")
            return nil
        }
        return CrashPoint(point: point, markerPath: marker)
    }

    /// Kills the process at `point` unless the marker exists. The marker is created exclusively
    /// first, so exactly one process crashes per marker even when several share it.
    func reached(_ point: Point) {
        guard point == self.point else { return }
        let descriptor = open(markerPath, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { return }
        close(descriptor)
        kill(getpid(), SIGKILL)
    }
}

extension Optional where Wrapped == CrashPoint {
    /// Lets call sites read `crashPoint.reached(.written)` whether or not a point is configured.
    func reached(_ point: CrashPoint.Point) {
        if case .some(let crash) = self { crash.reached(point) }
    }
}
