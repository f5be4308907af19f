import Foundation
import Postgres
import ServiceRuntime

/// What a task does (`fulfillment_task.kind`).
public enum TaskKind: String, Sendable, StoredStatus {
    /// Get All Subscription Statuses for one chain.
    case requery = "REQUERY"
    /// Get Notification History over a range.
    case recovery = "RECOVERY"
    /// Set App Account Token of a chain an operator or an import bound to a user.
    case setAppAccountToken = "SET_APP_ACCOUNT_TOKEN"
    /// Get Transaction History for a user's import of their existing purchases.
    case importHistory = "IMPORT"
    /// Finish Transaction for a transaction the worker delivered (`APPLE_FINISH_TRANSACTIONS`).
    case finishTransaction = "FINISH_TRANSACTION"

    /// The value as an SQL literal, for predicates the partial indexes must match.
    public var literal: StaticString {
        switch self {
        case .requery: "'REQUERY'"
        case .recovery: "'RECOVERY'"
        case .setAppAccountToken: "'SET_APP_ACCOUNT_TOKEN'"
        case .importHistory: "'IMPORT'"
        case .finishTransaction: "'FINISH_TRANSACTION'"
        }
    }
}

/// Where a task stands (`fulfillment_task.status`).
public enum TaskStatus: String, Sendable, StoredStatus {
    /// Waiting for a worker, or held by one under a lease.
    case pending = "PENDING"
    case done = "DONE"
    case failed = "FAILED"

    /// The value as an SQL literal, for predicates the partial indexes must match.
    public var literal: StaticString {
        switch self {
        case .pending: "'PENDING'"
        case .done: "'DONE'"
        case .failed: "'FAILED'"
        }
    }
}

/// A re-query or a recovery, held by a worker under a lease.
public struct ClaimedTask: Sendable {
    public enum Work: Sendable, Equatable {
        case requery(originalTransactionID: String)
        /// Get Notification History over `start..<end`, from `paginationToken` on (nil: the first
        /// page); with `onlyFailures`, only the notifications Apple failed to deliver.
        case recovery(start: Date, end: Date, paginationToken: String?, onlyFailures: Bool)
        /// Set App Account Token of the chain to its bound user's token.
        case setAppAccountToken(originalTransactionID: String)
        /// A user's import (`subscription_import`).
        case importHistory(importID: Int64)
        /// Tell Apple the transaction is delivered (Finish Transaction).
        case finishTransaction(transactionID: String)
    }
    public var id: Int64
    /// `Production` or `Sandbox`.
    public var environment: String
    public var work: Work
    /// Attempts so far, this one included.
    public var attempts: Int
    /// What earlier attempts (or pages) counted.
    public var result: TaskResult
}

/// What a task did, kept in `fulfillment_task.result` for the operator who asked.
public struct TaskResult: Codable, Sendable, Equatable {
    /// Notifications received from Apple (recovery) or subscriptions in Apple's answer (re-query).
    public var fetched = 0
    /// Events written (new notification UUIDs).
    public var stored = 0
    /// Already stored: nothing written.
    public var duplicates = 0
    /// Refused by verification (not Apple's, another app, another environment).
    public var refused = 0
    public var pages = 0
    /// The events written or found, to follow them.
    public var eventIDs: [Int64] = []
    /// What Apple answered a Set App Account Token (`SET`, `FAMILY_NOT_SUPPORTED`) or a Finish
    /// Transaction (`FINISHED`, `TRANSACTION_NOT_FOUND`).
    public var outcome: String?

    public init() {}

    /// Absent counters are zero: a new task's result is `{}`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        fetched = try container.decodeIfPresent(Int.self, forKey: .fetched) ?? 0
        stored = try container.decodeIfPresent(Int.self, forKey: .stored) ?? 0
        duplicates = try container.decodeIfPresent(Int.self, forKey: .duplicates) ?? 0
        refused = try container.decodeIfPresent(Int.self, forKey: .refused) ?? 0
        pages = try container.decodeIfPresent(Int.self, forKey: .pages) ?? 0
        eventIDs = try container.decodeIfPresent([Int64].self, forKey: .eventIDs) ?? []
        outcome = try container.decodeIfPresent(String.self, forKey: .outcome)
    }

    var json: String { String(decoding: (try? JSONEncoder().encode(self)) ?? Data("{}".utf8), as: UTF8.self) }
}

/// A task row as the operator who asked sees it.
public struct TaskOutcome: Sendable {
    public var id: Int64
    public var status: TaskStatus
    /// The `result` document as stored (counters, event ids).
    public var resultJSON: String
    public var errorCode: String?
    public var errorMessage: String?
}

/// The SQL of `fulfillment_task`: requests (workers' and operators'), leases, checkpoints and
/// outcomes. Safe with many workers: a claim takes one due row with SKIP LOCKED and a lease, and
/// every later write checks the lease is still its owner's.
public struct TaskStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    /// Asks for a recovery; one with the same key that no worker took yet is widened to cover
    /// this range too (a claimed one gave up its key, so a later gap gets its own task). Returns its id.
    @discardableResult
    public func requestRecovery(
        environment: String, start: Date, end: Date, reason: String, requestedBy: String, dedupKey: String?
    ) async throws -> Int64 {
        try await pool.withConnection { db in
            try await requestRecovery(
                environment: environment, start: start, end: end, reason: reason, requestedBy: requestedBy,
                dedupKey: dedupKey, on: db)
        }
    }

    private func requestRecovery(
        environment: String, start: Date, end: Date, reason: String, requestedBy: String, dedupKey: String?,
        on db: PostgresConnection
    ) async throws -> Int64 {
        try await db.query(
            """
            INSERT INTO fulfillment_task (kind, environment, range_start, range_end, reason, requested_by, dedup_key)
            VALUES (\(TaskKind.recovery), \(environment), \(start), \(end), \(reason), \(requestedBy), \(dedupKey))
            ON CONFLICT (dedup_key) WHERE status = \(sql: TaskStatus.pending.literal) DO UPDATE
               SET range_start = least(fulfillment_task.range_start, EXCLUDED.range_start),
                   range_end = greatest(fulfillment_task.range_end, EXCLUDED.range_end), updated_at = now()
            RETURNING id
            """
        ).single().decode("id", as: Int64.self)
    }

    /// How far back Apple keeps the notification history: 180 days in Production, 30 in Sandbox.
    public static func retentionDays(_ environment: String) -> Int { environment == "Production" ? 180 : 30 }

    /// Why an operator's recovery range cannot be asked for (nil: it can), for `subsctl recover`
    /// and the admin API alike.
    /// `names` are how the caller calls the two ends (`--from`, `from`).
    public static func recoveryRangeProblem(
        from: Date, to: Date, environment: String, now: Date, names: (from: String, to: String) = ("from", "to")
    ) -> String? {
        let days = retentionDays(environment)
        if from >= to { return "\(names.from) must be before \(names.to)" }
        if to > now + 300 { return "\(names.to) is in the future" }
        if from < now - Double(days) * 86_400 {
            return "\(names.from) is more than \(days) days ago: Apple keeps \(environment) history for \(days) days"
        }
        return nil
    }

    /// An operator's recovery (`subsctl recover`), with its audit row in the same transaction.
    public func requestRecovery(
        environment: String, start: Date, end: Date, reason: String, operator operatorName: String
    ) async throws -> Int64 {
        try await pool.transaction { db in
            let id = try await requestRecovery(
                environment: environment, start: start, end: end, reason: reason, requestedBy: operatorName,
                dedupKey: nil, on: db)
            try await audit(id, action: "RECOVERY_REQUESTED", operator: operatorName, reason: reason, on: db)
            return id
        }
    }

    /// An operator's re-query of a chain (`subsctl requery`), with its audit row; an equal pending
    /// request is reused and made due now. Returns the task id.
    public func requestRequery(
        environment: String, originalTransactionID: String, reason: String, operator operatorName: String
    ) async throws -> Int64 {
        try await pool.transaction { db in
            let id: Int64 = try await db.query(
                """
                INSERT INTO fulfillment_task (kind, environment, original_transaction_id, reason, requested_by, dedup_key)
                VALUES (\(TaskKind.requery), \(environment), \(originalTransactionID), \(reason), \(operatorName),
                        \(Self.requeryKey(environment: environment, originalTransactionID: originalTransactionID)))
                ON CONFLICT (dedup_key) WHERE status = \(sql: TaskStatus.pending.literal)
                DO UPDATE SET next_attempt_at = least(fulfillment_task.next_attempt_at, now()), updated_at = now()
                RETURNING id
                """
            ).single().decode("id")
            try await audit(id, action: "REQUERY_REQUESTED", operator: operatorName, reason: reason, on: db)
            return id
        }
    }

    /// Asks a worker to set the chain's appAccountToken at Apple, inside the caller's transaction
    /// (the binding that needs it); an equal pending request is reused. Returns the task id.
    public static func requestSetAppAccountToken(
        environment: String, originalTransactionID: String, reason: String, requestedBy: String, on db: PostgresConnection
    ) async throws -> Int64 {
        try await db.query(
            """
            INSERT INTO fulfillment_task (kind, environment, original_transaction_id, reason, requested_by, dedup_key)
            VALUES (\(TaskKind.setAppAccountToken), \(environment), \(originalTransactionID), \(reason), \(requestedBy),
                    \("\(TaskKind.setAppAccountToken.rawValue)/\(environment)/\(originalTransactionID)"))
            ON CONFLICT (dedup_key) WHERE status = \(sql: TaskStatus.pending.literal)
            DO UPDATE SET next_attempt_at = least(fulfillment_task.next_attempt_at, now()), updated_at = now()
            RETURNING id
            """
        ).single().decode("id")
    }

    /// Asks a worker to run a user's import, inside the transaction that records it.
    static func requestImport(importID: Int64, environment: String, requestedBy: String, on db: PostgresConnection)
        async throws
    {
        try await db.query(
            """
            INSERT INTO fulfillment_task (kind, environment, import_id, reason, requested_by, dedup_key)
            VALUES (\(TaskKind.importHistory), \(environment), \(importID), 'import of existing purchases', \(requestedBy),
                    \("\(TaskKind.importHistory.rawValue)/\(importID)"))
            ON CONFLICT (dedup_key) WHERE status = \(sql: TaskStatus.pending.literal) DO NOTHING
            """)
    }

    /// Asks a worker to call Finish Transaction for each of these delivered transactions, inside
    /// the transaction that delivers them; a transaction asked for before (in any status: done,
    /// failed, pending) is not asked for again.
    public static func requestFinishTransactions(
        _ transactions: [(environment: String, transactionID: String)], requestedBy: String, on db: PostgresConnection
    ) async throws {
        guard !transactions.isEmpty else { return }
        try await db.query(
            """
            INSERT INTO fulfillment_task (kind, environment, transaction_id, reason, requested_by)
            SELECT \(sql: TaskKind.finishTransaction.literal), d.environment, d.transaction_id, 'delivered', \(requestedBy)
              FROM unnest(\(PostgresArray(transactions.map(\.environment)))::text[],
                          \(PostgresArray(transactions.map(\.transactionID)))::text[]) AS d(environment, transaction_id)
            ON CONFLICT (environment, transaction_id) WHERE kind = \(sql: TaskKind.finishTransaction.literal) DO NOTHING
            """)
    }

    /// Deletes up to `limit` Finish Transaction tasks that ended DONE more than `days` days ago
    /// (one row per delivered transaction would grow without end); FAILED ones stay for an
    /// operator. Returns how many were deleted.
    public func deleteFinishedTransactions(olderThanDays days: Int, limit: Int = 10_000) async throws -> Int {
        try await pool.query(
            """
            DELETE FROM fulfillment_task
             WHERE id IN (SELECT id FROM fulfillment_task
                           WHERE kind = \(sql: TaskKind.finishTransaction.literal) AND status = \(sql: TaskStatus.done.literal)
                             AND completed_at < now() - make_interval(days => \(days)::int)
                           ORDER BY completed_at LIMIT \(limit))
            """
        ).affectedRows
    }

    /// Records that a Finish Transaction was given up (Apple refused it for good), for the
    /// operator who looks into it: the task as stored, under the worker's name.
    public func auditFinishGivenUp(_ id: Int64, owner: String, reason: String) async throws {
        try await pool.transaction { db in
            try await audit(id, action: "FINISH_TRANSACTION_FAILED", operator: owner, reason: reason, on: db)
        }
    }

    /// The deduplication key of a chain's pending re-query (the scan below builds the same in SQL).
    static func requeryKey(environment: String, originalTransactionID: String) -> String {
        "\(TaskKind.requery.rawValue)/\(environment)/\(originalTransactionID)"
    }

    /// The request's audit row: the task as stored, without its (empty) result.
    private func audit(_ id: Int64, action: String, operator operatorName: String, reason: String, on db: PostgresConnection)
        async throws
    {
        let task: PostgresJSON = try await db.query(
            "SELECT to_jsonb(t) - 'result' AS task FROM fulfillment_task t WHERE t.id = \(id)"
        ).single().decode("task")
        try await AuditLog(pool: pool).record(
            on: db, operator: operatorName, action: action, reason: reason, before: nil, after: task)
    }

    /// Flags the chains whose stored facts disagree, looking at the renewal infos changed within
    /// `window`. A chain disagrees when its newest renewal info was signed after the transaction
    /// the projection calls current (`user_subscription.last_transaction_id`) and either names
    /// another current product (an upgrade or crossgrade transaction never arrived) or renews
    /// more than a minute after that transaction expires without being in billing retry (a
    /// renewal transaction never arrived).
    /// Frozen chains and revoked current transactions are left alone; a chain re-queried within
    /// `cooldown` is not flagged again. Returns the chains flagged.
    public func requestRequeriesOfDisagreeingChains(
        environments: [String], window: Duration, cooldown: Duration, requestedBy: String
    ) async throws -> [String] {
        let rows = try await pool.query(
            """
            INSERT INTO fulfillment_task (kind, environment, original_transaction_id, reason, requested_by, dedup_key)
            SELECT \(sql: TaskKind.requery.literal), r.environment, r.original_transaction_id,
                   CASE WHEN r.product_id <> t.product_id
                        THEN 'FACTS_DISAGREE: renewal info names ' || r.product_id || ', current transaction ' || t.product_id
                        ELSE 'FACTS_DISAGREE: renewal date after the current transaction expires' END,
                   \(requestedBy), \(sql: TaskKind.requery.literal) || '/' || r.environment || '/' || r.original_transaction_id
              FROM apple_renewal_info r
              JOIN user_subscription s
                ON s.environment = r.environment AND s.original_transaction_id = r.original_transaction_id
              JOIN apple_transaction t ON t.environment = s.environment AND t.transaction_id = s.last_transaction_id
             WHERE r.updated_at >= now() - make_interval(secs => \(window.inSeconds))
               AND r.environment = ANY(\(PostgresArray(environments))::text[])
               AND s.frozen_reason IS NULL AND t.revocation_date IS NULL
               AND r.signed_date > t.signed_date
               AND (r.product_id <> t.product_id
                    OR (r.renewal_date > t.expires_date + interval '1 minute' AND NOT r.is_in_billing_retry))
               AND NOT EXISTS (SELECT 1 FROM fulfillment_task q
                                WHERE q.kind = \(sql: TaskKind.requery.literal) AND q.environment = r.environment
                                  AND q.original_transaction_id = r.original_transaction_id
                                  AND q.created_at > now() - make_interval(secs => \(cooldown.inSeconds)))
            ON CONFLICT (dedup_key) WHERE status = \(sql: TaskStatus.pending.literal) DO NOTHING
            RETURNING environment || ':' || original_transaction_id AS chain
            """)
        return try rows.map { try $0.decode("chain") }
    }

    /// Asks for the deliveries Apple failed over the last `window` (Get Notification History with
    /// onlyFailures), unless one was asked for within `interval`: every worker may call this, one
    /// task per interval results. Returns the task id, or nil when none was needed.
    @discardableResult
    public func requestFailedDeliveryRecovery(
        environment: String, window: Duration, interval: Duration, requestedBy: String
    ) async throws -> Int64? {
        try await pool.query(
            """
            INSERT INTO fulfillment_task (
                kind, environment, range_start, range_end, reason, requested_by, dedup_key, only_failures)
            SELECT \(sql: TaskKind.recovery.literal), \(environment), now() - make_interval(secs => \(window.inSeconds)), now(),
                   'failed deliveries', \(requestedBy), \("RECOVERY/FAILED/\(environment)"), true
             WHERE NOT EXISTS (SELECT 1 FROM fulfillment_task
                                WHERE kind = \(sql: TaskKind.recovery.literal) AND only_failures AND environment = \(environment)
                                  AND created_at > now() - make_interval(secs => \(interval.inSeconds)))
            ON CONFLICT (dedup_key) WHERE status = \(sql: TaskStatus.pending.literal) DO NOTHING
            RETURNING id
            """
        ).first?.decode("id", as: Int64.self)
    }

    /// Flags for a re-query the chains Apple went silent on, more than `after` past a moment
    /// their status changed by the clock: past their expiry with auto-renew on (or a commitment's
    /// charges remaining, which Apple takes whatever auto-renew says) and no renewal,
    /// expiry or billing-retry fact since (a missed DID_RENEW or EXPIRED); past their expiry with
    /// auto-renew off and no renewal info signed since (a missed EXPIRED); in billing retry past
    /// the grace period's end or the end of Apple's 60 days of retries with no word since (a missed
    /// DID_RECOVER or EXPIRED). Frozen and revoked chains are left alone; a chain re-queried within
    /// `cooldown` is not flagged again. Returns the chains flagged.
    public func requestRequeriesOfLapsedChains(
        environments: [String], after: Duration, cooldown: Duration, requestedBy: String
    ) async throws -> [String] {
        let rows = try await pool.query(
            """
            INSERT INTO fulfillment_task (kind, environment, original_transaction_id, reason, requested_by, dedup_key)
            SELECT \(sql: TaskKind.requery.literal), s.environment, s.original_transaction_id,
                   'LAPSED: past a moment of its status with no word from Apple since', \(requestedBy),
                   \(sql: TaskKind.requery.literal) || '/' || s.environment || '/' || s.original_transaction_id
              FROM user_subscription s
              LEFT JOIN apple_renewal_info r
                ON r.environment = s.environment AND r.original_transaction_id = s.original_transaction_id
              CROSS JOIN LATERAL (SELECT now() - make_interval(secs => \(after.inSeconds)) AS lapsed,
                                         s.auto_renew_enabled OR coalesce(s.expires_at < s.commitment_ends_at, false)
                                             AS renews) m
             WHERE s.expires_at < m.lapsed AND s.frozen_reason IS NULL
               AND s.environment = ANY(\(PostgresArray(environments))::text[])
               AND s.status <> 'REVOKED'
               AND (r.original_transaction_id IS NULL
                    OR m.renews AND r.signed_date < s.expires_at AND NOT r.is_in_billing_retry
                       AND r.expiration_intent IS NULL
                    OR NOT m.renews AND r.signed_date < s.expires_at
                    OR m.renews AND r.is_in_billing_retry
                       AND (r.grace_period_expires_at < m.lapsed AND r.signed_date < r.grace_period_expires_at
                            OR s.expires_at + interval '1440 hours' < m.lapsed
                               AND r.signed_date < s.expires_at + interval '1440 hours'))
               AND NOT EXISTS (SELECT 1 FROM fulfillment_task q
                                WHERE q.kind = \(sql: TaskKind.requery.literal) AND q.environment = s.environment
                                  AND q.original_transaction_id = s.original_transaction_id
                                  AND q.created_at > now() - make_interval(secs => \(cooldown.inSeconds)))
            ON CONFLICT (dedup_key) WHERE status = \(sql: TaskStatus.pending.literal) DO NOTHING
            RETURNING environment || ':' || original_transaction_id AS chain
            """)
        return try rows.map { try $0.decode("chain") }
    }

    /// Takes the oldest due task nobody holds, Finish Transaction tasks only when no other is due
    /// (a peak of deliveries queues one each), or nil. The task gives up its deduplication key:
    /// what is asked from now on may be past what it covers, so it becomes a task of its own.
    public func claim(owner: String, lease: Duration) async throws -> ClaimedTask? {
        guard
            let row = try await pool.query(
                """
                UPDATE fulfillment_task t
                   SET lease_owner = \(owner), lease_expires_at = now() + make_interval(secs => \(lease.inSeconds)),
                       attempts = t.attempts + 1, dedup_key = NULL, updated_at = now()
                 WHERE t.id = coalesce(
                           (SELECT id FROM fulfillment_task
                             WHERE status = \(sql: TaskStatus.pending.literal) AND next_attempt_at <= now()
                               AND kind <> \(sql: TaskKind.finishTransaction.literal)
                               AND (lease_expires_at IS NULL OR lease_expires_at < now())
                             ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED),
                           (SELECT id FROM fulfillment_task
                             WHERE status = \(sql: TaskStatus.pending.literal) AND next_attempt_at <= now()
                               AND (lease_expires_at IS NULL OR lease_expires_at < now())
                             ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED))
                RETURNING t.id, t.kind, t.environment, t.original_transaction_id, t.range_start, t.range_end,
                          t.pagination_token, t.only_failures, t.import_id, t.transaction_id, t.attempts,
                          t.result::text AS result
                """
            ).first
        else { return nil }
        let work: ClaimedTask.Work
        switch try row.decode("kind", as: TaskKind.self) {
        case .requery:
            work = .requery(originalTransactionID: try row.decode("original_transaction_id"))
        case .setAppAccountToken:
            work = .setAppAccountToken(originalTransactionID: try row.decode("original_transaction_id"))
        case .importHistory:
            work = .importHistory(importID: try row.decode("import_id"))
        case .finishTransaction:
            work = .finishTransaction(transactionID: try row.decode("transaction_id"))
        case .recovery:
            work = .recovery(
                start: try row.decode("range_start"), end: try row.decode("range_end"),
                paginationToken: try row.decode("pagination_token", as: String?.self), onlyFailures: try row.decode("only_failures"))
        }
        let result = try JSONDecoder().decode(TaskResult.self, from: Data(try row.decode("result", as: String.self).utf8))
        return ClaimedTask(
            id: try row.decode("id"), environment: try row.decode("environment"), work: work,
            attempts: try row.decode("attempts"), result: result)
    }

    /// Records progress and renews the lease; false when the lease is no longer `owner`'s.
    public func checkpoint(
        _ task: ClaimedTask, owner: String, lease: Duration, paginationToken: String?, result: TaskResult
    ) async throws -> Bool {
        try await pool.query(
            """
            UPDATE fulfillment_task
               SET pagination_token = \(paginationToken), result = \(result.json)::jsonb,
                   lease_expires_at = now() + make_interval(secs => \(lease.inSeconds)), updated_at = now()
             WHERE id = \(task.id) AND status = \(sql: TaskStatus.pending.literal) AND lease_owner = \(owner)
            """
        ).affectedRows == 1
    }

    /// Extends the leases `owner` still holds on these tasks to `lease` from now (the worker's
    /// lease heartbeat, between checkpoints); returns the ids renewed. A row locked by a
    /// checkpoint in flight is skipped: that checkpoint renews it.
    public func renew(_ ids: [Int64], owner: String, lease: Duration) async throws -> [Int64] {
        guard !ids.isEmpty else { return [] }
        return try await pool.query(
            """
            WITH held AS (
                SELECT id FROM fulfillment_task
                 WHERE id = ANY(\(PostgresArray(ids))::bigint[]) AND status = \(sql: TaskStatus.pending.literal)
                   AND lease_owner = \(owner)
                   FOR UPDATE SKIP LOCKED
            )
            UPDATE fulfillment_task t SET lease_expires_at = now() + make_interval(secs => \(lease.inSeconds))
              FROM held WHERE t.id = held.id
            RETURNING t.id
            """
        ).map { try $0.decode("id") }
    }

    public func complete(_ task: ClaimedTask, owner: String, result: TaskResult) async throws {
        try await pool.query(
            """
            UPDATE fulfillment_task
               SET status = \(TaskStatus.done), result = \(result.json)::jsonb, error_code = NULL, error_message = NULL,
                   lease_owner = NULL, lease_expires_at = NULL, completed_at = now(), updated_at = now()
             WHERE id = \(task.id) AND status = \(sql: TaskStatus.pending.literal) AND lease_owner = \(owner)
            """)
    }

    /// Gives the task back for a later attempt, or marks it FAILED when `retryAt` is nil.
    public func fail(_ task: ClaimedTask, owner: String, code: String, message: String, retryAt delay: Duration?)
        async throws
    {
        try await pool.query(
            """
            UPDATE fulfillment_task
               SET status = \(delay == nil ? TaskStatus.failed : TaskStatus.pending),
                   next_attempt_at = now() + make_interval(secs => \(delay?.inSeconds ?? 0)),
                   completed_at = CASE WHEN \(delay == nil) THEN now() END,
                   error_code = \(code), error_message = \(message), lease_owner = NULL, lease_expires_at = NULL,
                   updated_at = now()
             WHERE id = \(task.id) AND status = \(sql: TaskStatus.pending.literal) AND lease_owner = \(owner)
            """)
    }

    /// The task as the operator who asked sees it.
    public func outcome(of id: Int64) async throws -> TaskOutcome? {
        guard
            let row = try await pool.query(
                "SELECT status, result::text AS result, error_code, error_message FROM fulfillment_task WHERE id = \(id)"
            ).first
        else { return nil }
        return TaskOutcome(
            id: id, status: try row.decode("status"), resultJSON: try row.decode("result"),
            errorCode: try row.decode("error_code", as: String?.self),
            errorMessage: try row.decode("error_message", as: String?.self))
    }
}

/// A chain as `subsctl requery` shows it once Apple's answer is applied.
public struct RequeriedChain: Sendable {
    public var status: String
    public var activeProductID: String
    public var pendingProductID: String?
    public var expiresAt: Date?
    public var autoRenewEnabled: Bool
}

extension TaskStore {
    /// The chain's subscription row after a re-query; nil when there is none.
    public func chain(environment: String, originalTransactionID: String) async throws -> RequeriedChain? {
        guard
            let row = try await pool.query(
                """
                SELECT status, active_product_id, pending_product_id, expires_at, auto_renew_enabled
                  FROM user_subscription WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
                """
            ).first
        else { return nil }
        return RequeriedChain(
            status: try row.decode("status"), activeProductID: try row.decode("active_product_id"),
            pendingProductID: try row.decode("pending_product_id", as: String?.self),
            expiresAt: try row.decode("expires_at", as: Date?.self), autoRenewEnabled: try row.decode("auto_renew_enabled"))
    }
}

/// One row of the task queue as `subsctl tasks` lists it.
public struct TaskSummary: Sendable, Encodable {
    public var id: Int64
    public var kind: String
    public var environment: String
    /// What the task is about: the chain, the transaction, the import or the history range.
    public var subject: String
    public var status: String
    public var attempts: Int
    public var nextAttemptAt: Date?
    public var errorCode: String?
    public var errorMessage: String?
    public var requestedBy: String
    public var createdAt: Date
    public var completedAt: Date?
}

extension TaskStore {
    /// The newest tasks, of one kind and status when given (the operators' view of the queue).
    public func list(kind: TaskKind?, status: TaskStatus?, limit: Int) async throws -> [TaskSummary] {
        try await pool.query(
            """
            SELECT id, kind, environment, status, attempts, requested_by, created_at, completed_at, error_code, error_message,
                   CASE WHEN status = \(sql: TaskStatus.pending.literal) THEN next_attempt_at END AS next_attempt_at,
                   coalesce(original_transaction_id, transaction_id, 'import ' || import_id::text,
                            to_char(range_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || '..'
                            || to_char(range_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '') AS subject
              FROM fulfillment_task
             WHERE (\(kind?.rawValue)::text IS NULL OR kind = \(kind?.rawValue))
               AND (\(status?.rawValue)::text IS NULL OR status = \(status?.rawValue))
             ORDER BY id DESC LIMIT \(limit)
            """
        ).map { row in
            TaskSummary(
                id: try row.decode("id"), kind: try row.decode("kind"), environment: try row.decode("environment"),
                subject: try row.decode("subject"), status: try row.decode("status"), attempts: try row.decode("attempts"),
                nextAttemptAt: try row.decode("next_attempt_at"), errorCode: try row.decode("error_code"),
                errorMessage: try row.decode("error_message"), requestedBy: try row.decode("requested_by"),
                createdAt: try row.decode("created_at"), completedAt: try row.decode("completed_at"))
        }
    }
}
