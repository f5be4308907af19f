import Foundation
import Postgres

/// What the pipeline has not done yet, read from the source of truth for the backlog gauges:
/// outbox, events by status, DEAD events by error code, unmatched facts, re-query and recovery
/// tasks, the daily close, the newest Production notification. Read-only; every count uses an
/// index of its own (partial indexes per status, migration 0011 for the notifications).
public struct BacklogStore: Sendable {
    /// The session advisory lock of the one sampling instance (an arbitrary constant of this project).
    static let samplerLockKey: Int64 = 0x5AB1_E0B5_1C0C

    public init() {}

    /// Takes the sampler's session lock on `connection` if no other session holds it.
    public func tryLead(on connection: PostgresConnection) async throws -> Bool {
        try await connection.query("SELECT pg_try_advisory_lock(\(Self.samplerLockKey)) AS locked")[0].decode("locked")
    }

    /// Gives the sampler's lock back (a closed session gives it back too).
    public func resign(on connection: PostgresConnection) async throws {
        try await connection.query("SELECT pg_advisory_unlock(\(Self.samplerLockKey))")
    }

    /// One reading of every backlog.
    public func sample(on connection: PostgresConnection) async throws -> BacklogSample {
        let scalars = try await connection.query(
            """
            SELECT
              (SELECT count(*) FROM event_outbox) AS outbox_messages,
              (SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 FROM event_outbox) AS outbox_oldest,
              (SELECT count(*) FROM inbound_event WHERE process_status = 'RECEIVED') AS received,
              (SELECT count(*) FROM inbound_event WHERE process_status = 'PROCESSING') AS processing,
              (SELECT count(*) FROM inbound_event WHERE process_status = 'RETRY_WAIT') AS retry_wait,
              (SELECT count(*) FROM inbound_event WHERE process_status = 'DEAD') AS dead,
              (SELECT coalesce(extract(epoch FROM now() - min(received_at)), 0)::float8
                 FROM inbound_event WHERE process_status = 'RECEIVED') AS received_oldest,
              (SELECT coalesce(extract(epoch FROM now() - min(received_at)), 0)::float8
                 FROM inbound_event WHERE process_status = 'RETRY_WAIT') AS retry_wait_oldest,
              -- Ids grow with arrival: the highest is the newest (inbound_event_key_production_idx).
              (SELECT extract(epoch FROM now() - received_at)::float8
                 FROM inbound_event_key WHERE notification_uuid IS NOT NULL AND environment = 'Production'
                ORDER BY id DESC LIMIT 1) AS newest_production,
              (SELECT count(*) FROM credit_daily_bill
                WHERE closed_at IS NULL AND day < (now() AT TIME ZONE 'UTC')::date) AS overdue_bills,
              (SELECT coalesce(extract(epoch FROM now() - ((min(day) + 1)::timestamp AT TIME ZONE 'UTC')), 0)::float8
                 FROM credit_daily_bill WHERE closed_at IS NULL AND day < (now() AT TIME ZONE 'UTC')::date) AS close_delay
            """)[0]
        var sample = BacklogSample(
            outboxMessages: try scalars.decode("outbox_messages"), outboxOldestAge: try scalars.decode("outbox_oldest"),
            eventsByStatus: [
                "RECEIVED": try scalars.decode("received"), "PROCESSING": try scalars.decode("processing"),
                "RETRY_WAIT": try scalars.decode("retry_wait"), "DEAD": try scalars.decode("dead"),
            ],
            oldestAgeByStatus: [
                "RECEIVED": try scalars.decode("received_oldest"), "RETRY_WAIT": try scalars.decode("retry_wait_oldest"),
            ],
            newestProductionNotificationAge: try scalars.decode("newest_production"),
            overdueDailyBills: try scalars.decode("overdue_bills"), dailyCloseDelay: try scalars.decode("close_delay"))
        for row in try await connection.query(
            "SELECT coalesce(error_code, '') AS code, count(*) AS n FROM inbound_event WHERE process_status = 'DEAD' GROUP BY 1")
        {
            sample.deadByErrorCode[try row.decode("code")] = try row.decode("n")
        }
        for row in try await connection.query(
            "SELECT reason, count(*) AS n FROM unmatched_fact WHERE replayed_at IS NULL GROUP BY 1")
        {
            sample.unmatchedByReason[try row.decode("reason")] = try row.decode("n")
        }
        for row in try await connection.query("SELECT kind, status, count(*) AS n FROM fulfillment_task GROUP BY 1, 2") {
            sample.tasks[BacklogSample.TaskKey(kind: try row.decode("kind"), status: try row.decode("status"))] = try row.decode("n")
        }
        return sample
    }
}

/// One reading of the backlogs (ages in seconds, as of the database's clock).
public struct BacklogSample: Sendable, Equatable {
    public struct TaskKey: Sendable, Hashable {
        public var kind: String
        public var status: String

        public init(kind: String, status: String) {
            self.kind = kind
            self.status = status
        }
    }

    public var outboxMessages: Int
    public var outboxOldestAge: Double
    /// RECEIVED, PROCESSING, RETRY_WAIT and DEAD, zero included (SUCCEEDED is not counted: it is
    /// every event ever handled; `subs_fulfillment_events_total` is the throughput).
    public var eventsByStatus: [String: Int]
    /// The oldest RECEIVED and RETRY_WAIT events' age since they arrived (0: none).
    public var oldestAgeByStatus: [String: Double]
    /// Nil when no Production notification was ever stored.
    public var newestProductionNotificationAge: Double?
    /// Bills of past UTC days still open, and how long ago the oldest one's day ended (0: none).
    public var overdueDailyBills: Int
    public var dailyCloseDelay: Double
    public var deadByErrorCode: [String: Int] = [:]
    /// Unmatched facts not replayed yet (UNMATCHED_PRODUCT, UNMATCHED_ACCOUNT).
    public var unmatchedByReason: [String: Int] = [:]
    public var tasks: [TaskKey: Int] = [:]
}
