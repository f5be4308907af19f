import CRdKafka
import Foundation
import ServiceRuntime

// The raw layer: every librdkafka call of this module is made in this file (error names and
// codes aside, in KafkaError.swift), as Libpq.swift is for libpq. The consumer, producer and admin
// speak Swift to `RdKafka` and never see a C type.

/// What the C callbacks of one librdkafka client reach through its opaque pointer.
///
/// Sendable: every property is immutable and the closures are `@Sendable`.
final class ClientContext: Sendable {
    typealias RebalanceHook = @Sendable (_ kafka: RdKafka, _ event: RebalanceEvent) -> Void

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
    /// What a client is for: a consumer serves its events through the consumer poll.
    enum Kind { case producer, consumer }

    let handle: RdKafka
    let context: ClientContext

    init(_ kind: Kind, properties: [String: String], context: ClientContext) throws(KafkaError) {
        let type = kind == .producer ? RD_KAFKA_PRODUCER : RD_KAFKA_CONSUMER
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
        // Every event (rebalances, errors) of a consumer is then served by its consumer poll.
        if kind == .consumer { rd_kafka_poll_set_consumer(handle) }
        self.handle = RdKafka(rk: handle)
        self.context = context
    }

    deinit { rd_kafka_destroy(handle.rk) }

    /// The fatal error librdkafka raised on this client, if any.
    var fatalError: KafkaError? { handle.fatalError }
}

/// What to call with one produced message's delivery report, passed to librdkafka as `msg_opaque`.
final class DeliveryBox: Sendable {
    let topic: String
    let completion: @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void

    init(topic: String, completion: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void) {
        self.topic = topic
        self.completion = completion
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
    if error.code == .fatal, let rk, let fatal = RdKafka(rk: rk).fatalError { error = fatal }
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
        box.completion(
            .success(KafkaDeliveryReport(topic: box.topic, partition: message.pointee.partition, offset: message.pointee.offset)))
        outcome = nil
    } else {
        let error = KafkaError(message.pointee.err)
        box.completion(.failure(error))
        outcome = error
    }
    ClientContext.from(opaque)?.onDelivery?(outcome)
}

private let rebalanceCallback:
    @convention(c) (OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, UnsafeMutableRawPointer?) -> Void = {
        rk, err, partitions, opaque in
        guard let rk, let partitions, let context = ClientContext.from(opaque) else { return }
        let entries = KafkaTopicPartition.entries(of: partitions)
        let event: RebalanceEvent =
            switch err {
            case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS: .assign(entries)
            case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS: .revoke(entries)
            default: .failed(KafkaError(err))
            }
        context.onRebalance?(RdKafka(rk: rk), event)
    }

// MARK: Topic partition lists.

extension KafkaTopicPartition {
    /// librdkafka's "no offset" (`RD_KAFKA_OFFSET_INVALID`): the committed one, or none.
    static let noOffset = Int64(RD_KAFKA_OFFSET_INVALID)

    /// The entries of a librdkafka list, with their offsets.
    fileprivate static func entries(of list: UnsafePointer<rd_kafka_topic_partition_list_t>) -> [(KafkaTopicPartition, Int64)] {
        (0..<Int(list.pointee.cnt)).map { index in
            let element = list.pointee.elems[index]
            return (KafkaTopicPartition(topic: String(cString: element.topic), partition: element.partition), element.offset)
        }
    }
}

/// Builds a librdkafka list for the duration of `body` (which must not keep it).
private func withPartitionList<R>(
    _ entries: [(KafkaTopicPartition, Int64)], _ body: (UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> R
) -> R {
    let list = rd_kafka_topic_partition_list_new(Int32(max(entries.count, 1)))!
    defer { rd_kafka_topic_partition_list_destroy(list) }
    for (partition, offset) in entries {
        rd_kafka_topic_partition_list_add(list, partition.topic, partition.partition).pointee.offset = offset
    }
    return body(list)
}

// MARK: Operations.

/// A partition assignment change, as the consumer's rebalance callback hands it over.
enum RebalanceEvent {
    case assign([(KafkaTopicPartition, Int64)])
    case revoke([(KafkaTopicPartition, Int64)])
    case failed(KafkaError)
}

/// What one consumer poll returned.
enum ConsumerPoll {
    case message(KafkaMessage)
    case endOfPartition
    case fatal(KafkaError)
    /// A transient error reported as a message (a broker away, a partition not ready).
    case error(KafkaError, topic: String)
}

/// One librdkafka client's operations, not owning it (`RdKafkaClient` does): a value the
/// callbacks can hold as well. `@unchecked Sendable` for the same reason as `RdKafkaClient`.
struct RdKafka: @unchecked Sendable {
    let rk: OpaquePointer

    /// The fatal error librdkafka raised on this client, if any.
    var fatalError: KafkaError? {
        var errstr = [CChar](repeating: 0, count: 512)
        let err = rd_kafka_fatal_error(rk, &errstr, errstr.count)
        guard err != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        return KafkaError(code: .init(err), reason: String(errorBuffer: errstr), isFatal: true)
    }

    private static func check(_ err: rd_kafka_resp_err_t) -> KafkaError? {
        err == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : KafkaError(err)
    }

    private static func unassigned(_ partitions: [KafkaTopicPartition]) -> [(KafkaTopicPartition, Int64)] {
        partitions.map { ($0, KafkaTopicPartition.noOffset) }
    }

    // MARK: Consumer

    func subscribe(_ topics: [String]) -> KafkaError? {
        Self.check(
            withPartitionList(topics.map { (KafkaTopicPartition(topic: $0, partition: RD_KAFKA_PARTITION_UA), 0) }) {
                rd_kafka_subscribe(rk, $0)
            })
    }

    func unsubscribe() -> KafkaError? { Self.check(rd_kafka_unsubscribe(rk)) }

    /// Serves the final revocation and leaves the group (unless the member is static).
    func closeConsumer() -> KafkaError? { Self.check(rd_kafka_consumer_close(rk)) }

    /// Waits up to `timeoutMs` for a message or an event; callbacks (rebalances) run inside.
    func consumerPoll(timeoutMs: Int32) -> ConsumerPoll? {
        guard let message = rd_kafka_consumer_poll(rk, timeoutMs) else { return nil }
        defer { rd_kafka_message_destroy(message) }
        let err = message.pointee.err
        switch err {
        case RD_KAFKA_RESP_ERR_NO_ERROR:
            return .message(Self.copy(message))
        case RD_KAFKA_RESP_ERR__PARTITION_EOF:
            return .endOfPartition
        case RD_KAFKA_RESP_ERR__FATAL:
            return .fatal(fatalError ?? KafkaError(err))
        default:
            let topic = message.pointee.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
            return .error(KafkaError(err, reason: String(cString: rd_kafka_message_errstr(message))), topic: topic)
        }
    }

    /// Copies a message out of librdkafka's buffers.
    private static func copy(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> KafkaMessage {
        let m = message.pointee
        var headers: [KafkaMessageHeader] = []
        var list: OpaquePointer?
        if rd_kafka_message_headers(message, &list) == RD_KAFKA_RESP_ERR_NO_ERROR, let list {
            var name: UnsafePointer<CChar>?
            var value: UnsafeRawPointer?
            var size = 0
            var index = 0
            while rd_kafka_header_get_all(list, index, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
                headers.append(
                    KafkaMessageHeader(
                        key: name.map { String(cString: $0) } ?? "",
                        value: value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []))
                index += 1
            }
        }
        return KafkaMessage(
            topic: String(cString: rd_kafka_topic_name(m.rkt)), partition: m.partition, offset: m.offset,
            key: m.key.map { Array(UnsafeRawBufferPointer(start: $0, count: m.key_len)) },
            value: m.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: m.len)) } ?? [],
            headers: headers)
    }

    /// Hands offsets to auto-commit, which sends them in batches.
    func storeOffsets(_ offsets: [(KafkaTopicPartition, Int64)]) -> KafkaError? {
        Self.check(withPartitionList(offsets) { rd_kafka_offsets_store(rk, $0) })
    }

    /// Stores, then commits synchronously: auto-commit commits the stored offsets again when it
    /// unassigns, and an older stored offset would move the group back.
    func storeAndCommit(_ offsets: [(KafkaTopicPartition, Int64)]) -> KafkaError? {
        Self.check(
            withPartitionList(offsets) { list in
                let stored = rd_kafka_offsets_store(rk, list)
                return stored == RD_KAFKA_RESP_ERR_NO_ERROR ? rd_kafka_commit(rk, list, 0) : stored
            })
    }

    /// The fetch positions (local; empty when librdkafka cannot tell).
    func positions(_ partitions: [KafkaTopicPartition]) -> [(KafkaTopicPartition, Int64)] {
        withPartitionList(Self.unassigned(partitions)) { list in
            rd_kafka_position(rk, list) == RD_KAFKA_RESP_ERR_NO_ERROR ? KafkaTopicPartition.entries(of: list) : []
        }
    }

    /// The high watermark as of the last fetch (local; nil when not known yet).
    func cachedHighWatermark(_ partition: KafkaTopicPartition) -> Int64? {
        var low: Int64 = 0
        var high: Int64 = 0
        let known = rd_kafka_get_watermark_offsets(rk, partition.topic, partition.partition, &low, &high)
        return known == RD_KAFKA_RESP_ERR_NO_ERROR ? high : nil
    }

    func setPaused(_ partitions: [KafkaTopicPartition], _ paused: Bool) {
        guard !partitions.isEmpty else { return }
        _ = withPartitionList(Self.unassigned(partitions)) {
            paused ? rd_kafka_pause_partitions(rk, $0) : rd_kafka_resume_partitions(rk, $0)
        }
    }

    /// Whether the group rebalances incrementally (cooperative-sticky) rather than eagerly.
    var isCooperative: Bool { String(cString: rd_kafka_rebalance_protocol(rk)) == "COOPERATIVE" }

    /// After a revocation: whether the partitions were lost (another member may own them already).
    var assignmentLost: Bool { rd_kafka_assignment_lost(rk) != 0 }

    /// Replaces the whole assignment (eager protocol); nil clears it.
    func assign(_ entries: [(KafkaTopicPartition, Int64)]?) -> KafkaError? {
        guard let entries else { return Self.check(rd_kafka_assign(rk, nil)) }
        return Self.check(withPartitionList(entries) { rd_kafka_assign(rk, $0) })
    }

    func incrementalAssign(_ entries: [(KafkaTopicPartition, Int64)]) -> KafkaError? {
        withPartitionList(entries) { rd_kafka_incremental_assign(rk, $0) }.map(KafkaError.init(consuming:))
    }

    func incrementalUnassign(_ entries: [(KafkaTopicPartition, Int64)]) -> KafkaError? {
        withPartitionList(entries) { rd_kafka_incremental_unassign(rk, $0) }.map(KafkaError.init(consuming:))
    }

    /// The group's committed offsets, asked of its coordinator (blocking).
    func committed(_ partitions: [KafkaTopicPartition], timeoutMs: Int32) throws(KafkaError) -> [(KafkaTopicPartition, Int64)] {
        let (asked, entries) = withPartitionList(Self.unassigned(partitions)) { list in
            (rd_kafka_committed(rk, list, timeoutMs), KafkaTopicPartition.entries(of: list))
        }
        if let error = Self.check(asked) { throw error }
        return entries
    }

    /// The partition's low and high watermarks, asked of its leader (blocking).
    func queryWatermarks(_ partition: KafkaTopicPartition, timeoutMs: Int32) throws(KafkaError) -> (low: Int64, high: Int64) {
        var low: Int64 = 0
        var high: Int64 = 0
        let err = rd_kafka_query_watermark_offsets(rk, partition.topic, partition.partition, &low, &high, timeoutMs)
        if let error = Self.check(err) { throw error }
        return (low, high)
    }

    // MARK: Metadata and topics

    /// Every topic's partition count; a topic the broker reports with an error maps to that error.
    /// Asks for all topics: asking for one by name could make a broker that auto-creates topics
    /// create it.
    func topics(timeoutMs: Int32) throws(KafkaError) -> [String: Result<Int, KafkaError>] {
        var metadata: UnsafePointer<rd_kafka_metadata_t>?
        let err = rd_kafka_metadata(rk, 1, nil, &metadata, timeoutMs)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else { throw KafkaError(err) }
        defer { rd_kafka_metadata_destroy(metadata) }
        var topics: [String: Result<Int, KafkaError>] = [:]
        for index in 0..<Int(metadata.pointee.topic_cnt) {
            let entry = metadata.pointee.topics[index]
            topics[String(cString: entry.topic)] =
                entry.err == RD_KAFKA_RESP_ERR_NO_ERROR ? .success(Int(entry.partition_cnt)) : .failure(KafkaError(entry.err))
        }
        return topics
    }

    /// Creates a topic; one that exists already is fine.
    func createTopic(_ name: String, partitions: Int, replicationFactor: Int, timeoutMs: Int32) throws(KafkaError) {
        var errstr = [CChar](repeating: 0, count: 512)
        guard let topic = rd_kafka_NewTopic_new(name, Int32(partitions), Int32(replicationFactor), &errstr, errstr.count)
        else { throw KafkaError(code: .invalidArgument, reason: String(errorBuffer: errstr)) }
        defer { rd_kafka_NewTopic_destroy(topic) }
        let options = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS)
        defer { rd_kafka_AdminOptions_destroy(options) }
        _ = rd_kafka_AdminOptions_set_operation_timeout(options, timeoutMs, &errstr, errstr.count)
        _ = rd_kafka_AdminOptions_set_request_timeout(options, timeoutMs, &errstr, errstr.count)
        let queue = rd_kafka_queue_new(rk)
        defer { rd_kafka_queue_destroy(queue) }

        var topics: [OpaquePointer?] = [topic]
        rd_kafka_CreateTopics(rk, &topics, 1, options, queue)
        // The request carries its own timeout; the margin lets its error arrive first.
        guard let event = rd_kafka_queue_poll(queue, timeoutMs + 5000) else {
            throw KafkaError(code: .timedOut, reason: "no answer to CreateTopics for \(name)")
        }
        defer { rd_kafka_event_destroy(event) }
        let err = rd_kafka_event_error(event)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(err, reason: String(cString: rd_kafka_event_error_string(event)))
        }
        var count = 0
        guard let result = rd_kafka_event_CreateTopics_result(event),
            let results = rd_kafka_CreateTopics_result_topics(result, &count), count == 1, let topicResult = results[0]
        else { throw KafkaError(code: .invalidState, reason: "CreateTopics answered without a topic result") }
        let topicErr = rd_kafka_topic_result_error(topicResult)
        guard topicErr == RD_KAFKA_RESP_ERR_NO_ERROR || topicErr == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS else {
            throw KafkaError(topicErr, reason: rd_kafka_topic_result_error_string(topicResult).map { String(cString: $0) })
        }
    }

    // MARK: Producer

    /// Serves delivery reports, statistics and errors for up to `timeoutMs`.
    func poll(timeoutMs: Int32) { rd_kafka_poll(rk, timeoutMs) }

    /// Messages queued or in flight, not yet reported.
    var outstanding: Int { Int(rd_kafka_outq_len(rk)) }

    /// Fails every queued and in-flight message now (their reports follow at the next poll).
    func purge() { rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT) }

    /// Hands one message to librdkafka, which copies every byte before returning; `opaque` comes
    /// back with its delivery report.
    func produce(
        topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaMessageHeader], opaque: UnsafeMutableRawPointer
    ) -> KafkaError? {
        // One buffer holds the topic, key, value and headers (names NUL-terminated), so the
        // argument list can point into it without nesting a closure per header.
        var size = topic.utf8.count + 1 + (key?.count ?? 0) + value.count
        for header in headers { size += header.key.utf8.count + 1 + header.value.count }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 1)
        defer { buffer.deallocate() }
        var cursor = buffer
        func append(_ bytes: some Collection<UInt8>, terminate: Bool = false) -> UnsafeMutableRawPointer {
            let start = cursor
            let count = bytes.count
            UnsafeMutableRawBufferPointer(start: cursor, count: count).copyBytes(from: bytes)
            cursor += count
            if terminate {
                cursor.storeBytes(of: 0, as: UInt8.self)
                cursor += 1
            }
            return start
        }

        var arguments: [rd_kafka_vu_t] = []
        arguments.reserveCapacity(5 + headers.count)
        var topicArgument = rd_kafka_vu_t()
        topicArgument.vtype = RD_KAFKA_VTYPE_TOPIC
        topicArgument.u.cstr = UnsafePointer(append(topic.utf8, terminate: true).assumingMemoryBound(to: CChar.self))
        arguments.append(topicArgument)
        if let key {
            var argument = rd_kafka_vu_t()
            argument.vtype = RD_KAFKA_VTYPE_KEY
            argument.u.mem.ptr = append(key)
            argument.u.mem.size = key.count
            arguments.append(argument)
        }
        var valueArgument = rd_kafka_vu_t()
        valueArgument.vtype = RD_KAFKA_VTYPE_VALUE
        valueArgument.u.mem.ptr = append(value)
        valueArgument.u.mem.size = value.count
        arguments.append(valueArgument)
        for header in headers {
            var argument = rd_kafka_vu_t()
            argument.vtype = RD_KAFKA_VTYPE_HEADER
            argument.u.header.name = UnsafePointer(
                append(header.key.utf8, terminate: true).assumingMemoryBound(to: CChar.self))
            argument.u.header.val = UnsafeRawPointer(append(header.value))
            argument.u.header.size = header.value.count
            arguments.append(argument)
        }
        var flags = rd_kafka_vu_t()
        flags.vtype = RD_KAFKA_VTYPE_MSGFLAGS
        flags.u.i = RD_KAFKA_MSG_F_COPY
        arguments.append(flags)
        var opaqueArgument = rd_kafka_vu_t()
        opaqueArgument.vtype = RD_KAFKA_VTYPE_OPAQUE
        opaqueArgument.u.ptr = opaque
        arguments.append(opaqueArgument)

        guard let error = rd_kafka_produceva(rk, arguments, arguments.count) else { return nil }
        return KafkaError(consuming: error)
    }
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
