import CRdKafka
import Foundation
import ServiceRuntime

/// What the C callbacks of one librdkafka client reach through its opaque pointer.
///
/// Sendable: every property is immutable and the closures are `@Sendable`.
final class ClientContext: Sendable {
    typealias RebalanceHook =
        @Sendable (
            _ rk: OpaquePointer, _ err: rd_kafka_resp_err_t,
            _ partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>
        ) -> Void

    let logger: Logger
    let onError: (@Sendable (KafkaError) -> Void)?
    /// Receives each statistics JSON document (every `statistics.interval.ms`).
    let onStatistics: (@Sendable (String) -> Void)?
    /// Sees every delivery outcome after the sender was resumed (nil: delivered).
    let onDelivery: (@Sendable (KafkaError?) -> Void)?
    let onRebalance: RebalanceHook?

    init(
        logger: Logger, onError: (@Sendable (KafkaError) -> Void)? = nil,
        onStatistics: (@Sendable (String) -> Void)? = nil, onDelivery: (@Sendable (KafkaError?) -> Void)? = nil,
        onRebalance: RebalanceHook? = nil
    ) {
        self.logger = logger
        self.onError = onError
        self.onStatistics = onStatistics
        self.onDelivery = onDelivery
        self.onRebalance = onRebalance
    }

    static func from(_ opaque: UnsafeMutableRawPointer?) -> ClientContext? {
        opaque.map { Unmanaged<ClientContext>.fromOpaque($0).takeUnretainedValue() }
    }
}

/// Owns one `rd_kafka_t`, destroyed in deinit, and keeps its callbacks' context alive until then.
///
/// `@unchecked Sendable`: `handle` never changes after init and librdkafka handles are
/// thread-safe for the calls this module makes; each caller documents which thread may poll.
final class RdKafkaClient: @unchecked Sendable {
    let handle: OpaquePointer
    let context: ClientContext

    init(type: rd_kafka_type_t, properties: [String: String], context: ClientContext) throws(KafkaError) {
        guard let conf = rd_kafka_conf_new() else { throw KafkaError(code: .invalidArgument, reason: "rd_kafka_conf_new failed") }
        var errstr = [CChar](repeating: 0, count: 512)
        for (key, value) in properties.sorted(by: { $0.key < $1.key }) {
            guard rd_kafka_conf_set(conf, key, value, &errstr, errstr.count) == RD_KAFKA_CONF_OK else {
                rd_kafka_conf_destroy(conf)
                // librdkafka's message may quote the value, which may be a secret.
                throw KafkaError(code: .invalidArgument, reason: "invalid or unknown configuration property \(key)")
            }
        }
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(context).toOpaque())
        rd_kafka_conf_set_log_cb(conf, logCallback)
        rd_kafka_conf_set_error_cb(conf, errorCallback)
        if context.onStatistics != nil { rd_kafka_conf_set_stats_cb(conf, statisticsCallback) }
        if type == RD_KAFKA_PRODUCER { rd_kafka_conf_set_dr_msg_cb(conf, deliveryCallback) }
        if context.onRebalance != nil { rd_kafka_conf_set_rebalance_cb(conf, rebalanceCallback) }

        guard let handle = rd_kafka_new(type, conf, &errstr, errstr.count) else {
            rd_kafka_conf_destroy(conf)  // rd_kafka_new only takes the configuration on success
            throw KafkaError(code: .invalidArgument, reason: String(errorBuffer: errstr))
        }
        self.handle = handle
        self.context = context
    }

    deinit { rd_kafka_destroy(handle) }

    /// The fatal error librdkafka raised on this client, if any.
    var fatalError: KafkaError? { fatalErrorOf(handle) }
}

/// The delivery continuation of one produced message, passed to librdkafka as `msg_opaque`.
final class DeliveryBox: Sendable {
    let topic: String
    let continuation: CheckedContinuation<KafkaDeliveryReport, any Error>

    init(topic: String, continuation: CheckedContinuation<KafkaDeliveryReport, any Error>) {
        self.topic = topic
        self.continuation = continuation
    }
}

// MARK: C callbacks. They run on librdkafka's threads (logs) or the thread that polls (the rest).

private let logCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void = {
    rk, level, facility, text in
    guard let context = ClientContext.from(rd_kafka_opaque(rk)) else { return }
    let mapped: LogLevel =
        switch level {
        case ...2: .critical
        case 3: .error
        case 4: .warning
        case 5: .notice
        case 6: .info
        default: .debug
        }
    guard mapped >= context.logger.level else { return }
    let facilityName = facility.map { String(cString: $0) } ?? ""
    guard let suppressed = LogThrottle.shared.admit("log:\(facilityName):\(level)") else { return }
    var metadata: Logger.Metadata = [
        "kafka.facility": .string(facilityName), "kafka.detail": .string(text.map { String(cString: $0) } ?? ""),
    ]
    if suppressed > 0 { metadata["kafka.suppressed"] = .int(Int64(suppressed)) }
    context.logger.log(mapped, "librdkafka", metadata)
}

private let errorCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void = {
    rk, err, reason, opaque in
    guard let context = ClientContext.from(opaque) else { return }
    var error = KafkaError(code: .init(rawValue: err), reason: reason.map { String(cString: $0) } ?? "")
    if error.code == .fatal, let rk, let fatal = fatalErrorOf(rk) { error = fatal }
    // Transport failures are already logged by librdkafka itself (facility FAIL). A fatal error
    // is logged every time: it replaces a client, which must never go unseen.
    if error.code.rawValue != RD_KAFKA_RESP_ERR__TRANSPORT.rawValue,
        let suppressed = error.isFatal ? 0 : LogThrottle.shared.admit("error:\(error.code.rawValue)")
    {
        var metadata: Logger.Metadata = ["error": .string(error.description)]
        if suppressed > 0 { metadata["kafka.suppressed"] = .int(Int64(suppressed)) }
        context.logger.log(error.isFatal ? .error : .warning, "kafka client error", metadata)
    }
    context.onError?(error)
}

/// The fatal error librdkafka raised on a client, if any.
func fatalErrorOf(_ rk: OpaquePointer) -> KafkaError? {
    var errstr = [CChar](repeating: 0, count: 512)
    let err = rd_kafka_fatal_error(rk, &errstr, errstr.count)
    guard err != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
    return KafkaError(code: .init(err), reason: String(errorBuffer: errstr), isFatal: true)
}

private let statisticsCallback: @convention(c) (OpaquePointer?, UnsafeMutablePointer<CChar>?, Int, UnsafeMutableRawPointer?) -> Int32 = {
    _, json, length, opaque in
    if let json, let context = ClientContext.from(opaque) {
        context.onStatistics?(String(decoding: UnsafeRawBufferPointer(start: json, count: length), as: UTF8.self))
    }
    return 0  // librdkafka frees the document
}

private let deliveryCallback: @convention(c) (OpaquePointer?, UnsafePointer<rd_kafka_message_t>?, UnsafeMutableRawPointer?) -> Void = {
    _, message, opaque in
    guard let message, let boxPointer = message.pointee._private else { return }
    let box = Unmanaged<DeliveryBox>.fromOpaque(boxPointer).takeRetainedValue()
    let outcome: KafkaError?
    if message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR {
        box.continuation.resume(
            returning: KafkaDeliveryReport(
                topic: box.topic, partition: message.pointee.partition, offset: message.pointee.offset))
        outcome = nil
    } else {
        let error = KafkaError(message.pointee.err)
        box.continuation.resume(throwing: error)
        outcome = error
    }
    ClientContext.from(opaque)?.onDelivery?(outcome)
}

private let rebalanceCallback:
    @convention(c) (OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, UnsafeMutableRawPointer?) -> Void = {
        rk, err, partitions, opaque in
        guard let rk, let partitions, let context = ClientContext.from(opaque) else { return }
        context.onRebalance?(rk, err, partitions)
    }

// MARK: Topic partition lists.

extension KafkaTopicPartition {
    /// The entries of a librdkafka list, with their offsets.
    static func entries(of list: UnsafePointer<rd_kafka_topic_partition_list_t>) -> [(KafkaTopicPartition, Int64)] {
        (0..<Int(list.pointee.cnt)).map { index in
            let element = list.pointee.elems[index]
            return (KafkaTopicPartition(topic: String(cString: element.topic), partition: element.partition), element.offset)
        }
    }
}

/// Builds a librdkafka list for the duration of `body` (which must not keep it).
func withPartitionList<R>(
    _ entries: [(KafkaTopicPartition, Int64)], _ body: (UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> R
) -> R {
    let list = rd_kafka_topic_partition_list_new(Int32(max(entries.count, 1)))!
    defer { rd_kafka_topic_partition_list_destroy(list) }
    for (partition, offset) in entries {
        rd_kafka_topic_partition_list_add(list, partition.topic, partition.partition).pointee.offset = offset
    }
    return body(list)
}

// MARK: Threads.

/// Runs `body` on a thread of its own, so blocking librdkafka calls never occupy the cooperative pool.
func onDedicatedThread<T: Sendable>(name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.name = name
        thread.start()
    }
}

extension String {
    /// The NUL-terminated message librdkafka wrote into an error buffer.
    init(errorBuffer buffer: [CChar]) {
        self.init(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
