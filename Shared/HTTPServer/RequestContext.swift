import ServiceRuntime

/// What a handler knows about its request beyond the request itself: the trace id, a logger
/// stamped with it, and whatever middleware established on the way in (an authenticated
/// principal, say). The router makes one per matched request; middleware passes on an amended copy.
///
/// An application declares its own context type with the fields its middleware fills in.
public protocol RequestContext: Sendable {
    /// A context before any middleware ran.
    init(traceID: String, logger: Logger)
    var traceID: String { get }
    var logger: Logger { get set }
}

/// A context with nothing beyond the trace id and logger, for routers without middleware state.
public struct BasicRequestContext: RequestContext {
    public let traceID: String
    public var logger: Logger

    public init(traceID: String, logger: Logger) {
        self.traceID = traceID
        self.logger = logger
    }
}
