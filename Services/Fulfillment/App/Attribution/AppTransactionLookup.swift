import AppStore
import Domain
import ServiceRuntime
import Storage

/// Asks Apple for the Apple Account (Get App Transaction Info) of a token-less transaction signed
/// without `appTransactionId` (before iOS 18.4) on a chain nothing here gives to anyone, so the
/// apply can attribute it by the one-candidate rule, as `app_transaction_lookup`.
///
/// It runs before the apply, outside its transaction: that transaction holds the locks of a whole
/// batch of chains, and a call to Apple inside it would lend Apple's latency and failures to every
/// event of the batch. Here only this event waits, for one short call (`limits`), and any failure
/// leaves the fact as it was signed: unattributed, never guessed.
struct AppTransactionLookup: Sendable {
    /// Clients with short limits: the event's own apply waits for the answer.
    let clients: AppStoreAPIClients
    let verifier: SignedDataVerifier
    let bindings: ChainBindingStore

    /// At most ~10 s and two requests per lookup, against the 45 s and four of a task's call.
    static func limits(_ configuration: AppStoreServerAPIConfiguration) -> AppStoreServerAPIConfiguration {
        var limited = configuration
        limited.timeouts = AppStoreAPITimeouts(connect: .seconds(2), read: .seconds(4), total: .seconds(10))
        limited.retryPolicy = AppStoreAPIRetryPolicy(maxAttempts: 2)
        return limited
    }

    /// The event with its transaction's `appTransactionId` filled from Apple's signed answer when
    /// the lookup applies and succeeds; otherwise the event unchanged.
    func complete(_ verified: VerifiedEvent, log: Logger) async -> VerifiedEvent {
        guard case .applyTransaction(_) = verified.source.action, var record = verified.transaction,
            record.appTransactionID == nil, record.fact.appAccountToken == nil, record.fact.revocationDate == nil,
            let environment = AppStoreEnvironment(rawValue: record.fact.environment),
            let client = clients.client(for: record.fact.environment)
        else { return verified }
        do {
            // A chain with an owner, a binding or a claimant attributes itself: Apple is not asked.
            guard
                try await !bindings.isClaimed(
                    environment: record.fact.environment, originalTransactionID: record.fact.originalTransactionID)
            else { return verified }
        } catch {
            // The apply reads the same rows and retries on its own if the database is away.
            return verified
        }
        let (account, outcome) = await ask(client, record.fact.transactionID, environment: environment, log: log)
        Self.count(outcome)
        guard let account else { return verified }
        record.appTransactionID = account
        record.appTransactionLookedUp = true
        var completed = verified
        completed.transaction = record
        return completed
    }

    /// Apple's verified `appTransactionId` for the transaction, or nil; and the outcome's label.
    private func ask(_ client: AppStoreServerAPIClient, _ transactionID: String, environment: AppStoreEnvironment, log: Logger)
        async -> (String?, String)
    {
        let signed: String?
        do {
            signed = try await client.getAppTransactionInfo(transactionId: transactionID).signedAppTransactionInfo
        } catch {
            log.warning("Get App Transaction Info failed; the purchase stays unattributed", ["appstore.error": .string(error.description)])
            return (nil, "apple_error")
        }
        guard let signed else {
            log.warning("Get App Transaction Info answered without an app transaction; the purchase stays unattributed")
            return (nil, "apple_error")
        }
        do {
            let app = try await verifier.verifyAppTransaction(signed, expectedEnvironment: environment)
            guard let account = app.appTransactionId, !account.isEmpty else {
                log.warning("Apple's app transaction names no appTransactionId; the purchase stays unattributed")
                return (nil, "apple_error")
            }
            return (account, "found")
        } catch {
            log.warning(
                "Apple's app transaction did not verify; the purchase stays unattributed",
                ["error.code": .string(error.code.rawValue), "error.reason": .string(error.description)])
            return (nil, "unverified")
        }
    }

    /// `subs_app_transaction_lookups_total{outcome}`: found, apple_error, unverified.
    static func count(_ outcome: String) {
        MetricsRegistry.shared.counter(
            "subs_app_transaction_lookups_total",
            help: "Get App Transaction Info calls for token-less transactions signed without appTransactionId, by outcome",
            labels: ["outcome": outcome]
        ).increment()
    }
}
