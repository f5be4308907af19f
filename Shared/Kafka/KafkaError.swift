import CRdKafka

/// A failure reported by librdkafka (or by this wrapper, using librdkafka's local codes).
///
/// The description names the code and librdkafka's reason; it never contains message data.
public struct KafkaError: Error, Sendable, CustomStringConvertible {
    /// A librdkafka error code (`rd_kafka_resp_err_t`): negative values are local to the client,
    /// positive ones come from the broker. Open, so codes not listed here still round-trip.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        init(_ err: rd_kafka_resp_err_t) { rawValue = err.rawValue }

        /// librdkafka's symbolic name, such as `_MSG_TIMED_OUT` or `UNKNOWN_TOPIC_OR_PART`.
        public var description: String {
            String(cString: rd_kafka_err2name(rd_kafka_resp_err_t(rawValue: rawValue)))
        }

        public static let messageTimedOut = Code(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT)
        public static let queueFull = Code(RD_KAFKA_RESP_ERR__QUEUE_FULL)
        public static let timedOut = Code(RD_KAFKA_RESP_ERR__TIMED_OUT)
        public static let invalidArgument = Code(RD_KAFKA_RESP_ERR__INVALID_ARG)
        /// The call does not fit the client's state (such as running a consumer twice).
        public static let invalidState = Code(RD_KAFKA_RESP_ERR__STATE)
        /// The client was shut down before the operation completed.
        public static let destroyed = Code(RD_KAFKA_RESP_ERR__DESTROY)
        /// The message was dropped before it was sent (the producer was replaced or shut down).
        public static let purgedFromQueue = Code(RD_KAFKA_RESP_ERR__PURGE_QUEUE)
        /// The message was dropped while in flight: it may or may not have been written.
        public static let purgedInFlight = Code(RD_KAFKA_RESP_ERR__PURGE_INFLIGHT)
        public static let fatal = Code(RD_KAFKA_RESP_ERR__FATAL)
        public static let unknownTopic = Code(RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC)
        public static let unknownTopicOrPartition = Code(RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        public static let topicAlreadyExists = Code(RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
        public static let messageSizeTooLarge = Code(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)
        public static let unknownProducerID = Code(RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID)
        public static let outOfOrderSequenceNumber = Code(RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER)
        public static let invalidProducerEpoch = Code(RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH)
        public static let invalidProducerIDMapping = Code(RD_KAFKA_RESP_ERR_INVALID_PRODUCER_ID_MAPPING)

        /// Errors that repeating the same call cannot fix.
        static let permanent: Set<Code> = [invalidArgument, invalidState, destroyed, fatal, messageSizeTooLarge]
    }

    public var code: Code
    /// librdkafka's human-readable reason.
    public var reason: String
    /// The client instance that reported it is unusable (librdkafka raised a fatal error).
    public var isFatal: Bool
    /// Repeating the operation may succeed (the broker may be back, the queue may drain...).
    public var isRetriable: Bool

    /// The raw `rd_kafka_resp_err_t` value.
    public var rdKafkaCode: Int32 { code.rawValue }

    public init(code: Code, reason: String, isFatal: Bool = false, isRetriable: Bool? = nil) {
        self.code = code
        self.reason = reason
        self.isFatal = isFatal || code == .fatal
        self.isRetriable = isRetriable ?? (!self.isFatal && !Code.permanent.contains(code))
    }

    init(_ err: rd_kafka_resp_err_t, reason: String? = nil) {
        self.init(code: Code(err), reason: reason ?? String(cString: rd_kafka_err2str(err)))
    }

    /// Takes ownership of an `rd_kafka_error_t` (freeing it) and keeps librdkafka's verdicts.
    init(consuming error: OpaquePointer) {
        defer { rd_kafka_error_destroy(error) }
        self.init(
            code: Code(rd_kafka_error_code(error)), reason: String(cString: rd_kafka_error_string(error)),
            isFatal: rd_kafka_error_is_fatal(error) != 0, isRetriable: rd_kafka_error_is_retriable(error) != 0)
    }

    public var description: String { "KafkaError(\(code) [\(code.rawValue)]: \(reason))" }
}
