import Events
import Foundation
import Postgres
import ServiceRuntime

/// The one owner of the event pipeline's tables (`inbound_event`, `inbound_event_key`,
/// `notification_uuid_conflict`, `event_outbox`, `processed_event`, `unmatched_fact`): an event's
/// life from intake to retention, a file per step (`+Intake`, `+Outbox`, `+Lease`, `+Retention`).
///
/// `inbound_event` is partitioned by month, so its deduplication keys live in `inbound_event_key`
/// (unpartitioned, unique): an event is found through its key, whose received_at names its month.
public struct EventStore: Sendable {
    public let pool: PostgresPool
    /// The topic the outbox's messages are published on.
    public let topic: String

    public init(pool: PostgresPool, topic: String) {
        self.pool = pool
        self.topic = topic
    }
}
