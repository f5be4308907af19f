import Foundation
import Postgres

/// A re-query or a recovery, held by this worker under a lease.
struct ClaimedTask: Sendable {
    enum Work: Sendable, Equatable {
        case requery(originalTransactionID: String)
        /// Get Notification History over `start..<end`, from `paginationToken` on (nil: the first page).
        case recovery(start: Date, end: Date, paginationToken: String?)
    }
    var id: Int64
    /// `Production` or `Sandbox`.
    var environment: String
    var work: Work
    /// Attempts so far, this one included.
    var attempts: Int
    /// What earlier attempts (or pages) counted.
    var result: TaskResult
}

/// What a task did, kept in `fulfillment_task.result` for the operator who asked.
struct TaskResult: Codable, Sendable, Equatable {
    /// Notifications received from Apple (recovery) or subscriptions in Apple's answer (re-query).
    var fetched = 0
    /// Events written (new notification UUIDs).
    var stored = 0
    /// Already stored: nothing written.
    var duplicates = 0
    /// Refused by verification (not Apple's, another app, another environment).
    var refused = 0
    var pages = 0
    /// The events written or found, to follow them.
    var eventIDs: [Int64] = []

    init() {}

    /// Absent counters are zero: a new task's result is `{}`.
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        fetched = try container.decodeIfPresent(Int.self, forKey: .fetched) ?? 0
        stored = try container.decodeIfPresent(Int.self, forKey: .stored) ?? 0
        duplicates = try container.decodeIfPresent(Int.self, forKey: .duplicates) ?? 0
        refused = try container.decodeIfPresent(Int.self, forKey: .refused) ?? 0
        pages = try container.decodeIfPresent(Int.self, forKey: .pages) ?? 0
        eventIDs = try container.decodeIfPresent([Int64].self, forKey: .eventIDs) ?? []
    }

    static let decoder = JSONDecoder()
    var json: String { String(decoding: (try? JSONEncoder().encode(self)) ?? Data("{}".utf8), as: UTF8.self) }
}

/// Why a task attempt stopped.
enum TaskFailure: Error, Sendable {
    /// Later may work (network, Apple 429/5xx, database); retried with backoff.
    case retryable(code: String, message: String)
    /// Never works as asked (unknown transaction, bad range): FAILED at once.
    case permanent(code: String, message: String)
    /// Another worker holds the task now; it carries on from the last checkpoint.
    case leaseLost
}

/// The SQL of `fulfillment_task`: requests, leases, checkpoints and outcomes. Safe with many
/// workers: a claim takes one due row with SKIP LOCKED and a lease, and every later write checks
/// the lease is still ours.
struct TaskStore: Sendable {
    let pool: PostgresPool
    let owner: String
    let lease: Duration

    /// Asks for a recovery; one with the same key that no worker took yet is widened to cover
    /// this range too (a claimed one gave up its key, so a later gap gets its own task). Returns its id.
    @discardableResult
    func requestRecovery(
        environment: String, start: Date, end: Date, reason: String, dedupKey: String?
    ) async throws -> Int64 {
        try await pool.query(
            """
            INSERT INTO fulfillment_task (kind, environment, range_start, range_end, reason, requested_by, dedup_key)
            VALUES ('RECOVERY', \(environment), \(start), \(end), \(reason), \(owner), \(dedupKey))
            ON CONFLICT (dedup_key) WHERE status = 'PENDING' DO UPDATE
               SET range_start = least(fulfillment_task.range_start, EXCLUDED.range_start),
                   range_end = greatest(fulfillment_task.range_end, EXCLUDED.range_end), updated_at = now()
            RETURNING id
            """
        ).first!.decode("id", as: Int64.self)
    }

    /// Takes the oldest due task nobody holds, or nil. The task gives up its deduplication key:
    /// what is asked from now on may be past what it covers, so it becomes a task of its own.
    func claim() async throws -> ClaimedTask? {
        guard
            let row = try await pool.query(
                """
                UPDATE fulfillment_task t
                   SET lease_owner = \(owner), lease_expires_at = now() + make_interval(secs => \(RetryPolicy.seconds(lease))),
                       attempts = t.attempts + 1, dedup_key = NULL, updated_at = now()
                 WHERE t.id = (SELECT id FROM fulfillment_task
                                WHERE status = 'PENDING' AND next_attempt_at <= now()
                                  AND (lease_expires_at IS NULL OR lease_expires_at < now())
                                ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
                RETURNING t.id, t.kind, t.environment, t.original_transaction_id, t.range_start, t.range_end,
                          t.pagination_token, t.attempts, t.result::text AS result
                """
            ).first
        else { return nil }
        let work: ClaimedTask.Work
        if try row.decode("kind", as: String.self) == "REQUERY" {
            work = .requery(originalTransactionID: try row.decode("original_transaction_id"))
        } else {
            work = .recovery(
                start: try row.decode("range_start"), end: try row.decode("range_end"),
                paginationToken: try row.decode("pagination_token", as: String?.self))
        }
        let result = try TaskResult.decoder.decode(TaskResult.self, from: Data(try row.decode("result", as: String.self).utf8))
        return ClaimedTask(
            id: try row.decode("id"), environment: try row.decode("environment"), work: work,
            attempts: try row.decode("attempts"), result: result)
    }

    /// Records progress and renews the lease; false when the lease is no longer ours.
    func checkpoint(_ task: ClaimedTask, paginationToken: String?, result: TaskResult) async throws -> Bool {
        try await pool.query(
            """
            UPDATE fulfillment_task
               SET pagination_token = \(paginationToken), result = \(result.json)::jsonb,
                   lease_expires_at = now() + make_interval(secs => \(RetryPolicy.seconds(lease))), updated_at = now()
             WHERE id = \(task.id) AND status = 'PENDING' AND lease_owner = \(owner)
            """
        ).affectedRows == 1
    }

    func complete(_ task: ClaimedTask, result: TaskResult) async throws {
        try await pool.query(
            """
            UPDATE fulfillment_task
               SET status = 'DONE', result = \(result.json)::jsonb, error_code = NULL, error_message = NULL,
                   lease_owner = NULL, lease_expires_at = NULL, completed_at = now(), updated_at = now()
             WHERE id = \(task.id) AND status = 'PENDING' AND lease_owner = \(owner)
            """)
    }

    /// Gives the task back for a later attempt, or marks it FAILED when `retryAt` is nil.
    func fail(_ task: ClaimedTask, code: String, message: String, retryAt delay: Duration?) async throws {
        try await pool.query(
            """
            UPDATE fulfillment_task
               SET status = CASE WHEN \(delay == nil) THEN 'FAILED' ELSE 'PENDING' END,
                   next_attempt_at = now() + make_interval(secs => \(delay.map(RetryPolicy.seconds) ?? 0)),
                   completed_at = CASE WHEN \(delay == nil) THEN now() END,
                   error_code = \(code), error_message = \(message), lease_owner = NULL, lease_expires_at = NULL,
                   updated_at = now()
             WHERE id = \(task.id) AND status = 'PENDING' AND lease_owner = \(owner)
            """)
    }
}
