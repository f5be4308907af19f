import Domain
import Foundation
import Testing

/// The status between facts: the clock moves a row at the moments it names, and a row advanced by
/// the clock is the row the facts give at that instant, in every arrival order.
@Suite struct SubscriptionClockTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01T00:00:00Z
    let day: TimeInterval = 86_400
    let projections = SubscriptionProjectionTests()

    /// Apple tries the renewal a day early and fails: the failure arrives while the period is paid.
    func failure(grace: Date?, autoRenew: Bool = true) -> RenewalFact {
        projections.renewal(signed: t0 + 29 * day, grace: grace, retry: true, autoRenew: autoRenew)
    }

    /// The status at each instant of `instants` for every arrival order of `facts`, and the row
    /// advanced from every earlier instant to it.
    func statuses(_ transactions: [TransactionFact], _ renewals: [RenewalFact], at instants: [Date]) -> [SubscriptionStatus?] {
        var result: [SubscriptionStatus?] = []
        let orders = projections.permutations(transactions.map { Fact.transaction($0) } + renewals.map { Fact.renewal($0) })
        for now in instants {
            let states = orders.map { order -> SubscriptionState? in
                var facts = ChainFacts()
                for fact in order {
                    switch fact {
                    case .transaction(let t): facts.record(t)
                    case .renewal(let r): facts.record(r)
                    }
                }
                return SubscriptionProjection.project(facts, now: now)
            }
            #expect(Set(states.map { $0 }).count == 1, "every arrival order gives one row at \(now)")
            for earlier in instants where earlier <= now {
                let advanced = projections.project(transactions, renewals, now: earlier)?.advanced(to: now)
                #expect(advanced == states[0], "advanced from \(earlier) to \(now)")
            }
            result.append(states[0]?.status)
        }
        return result
    }

    enum Fact {
        case transaction(TransactionFact)
        case renewal(RenewalFact)
    }

    @Test func aFailureBeforeExpiryKeepsActiveUntilExpiryThenRetryThenExpired() {
        let purchase = projections.tx("1", purchase: t0, expires: t0 + 30 * day)
        let instants = [t0 + 29.5 * day, t0 + 30 * day - 1, t0 + 30 * day, t0 + 31 * day, t0 + 90 * day - 1, t0 + 90 * day]
        #expect(
            statuses([purchase], [failure(grace: nil)], at: instants)
                == [.active, .active, .billingRetry, .billingRetry, .billingRetry, .expired])
        let state = projections.project([purchase], [failure(grace: nil)], now: t0 + 29.5 * day)
        #expect(state?.nextChangeAt == t0 + 30 * day)
        #expect(state?.advanced(to: t0 + 30 * day).nextChangeAt == t0 + 30 * day + SubscriptionTimeline.billingRetryWindow)
    }

    @Test func aFailureWithAGraceDateGivesGraceAtExpiryAndKeepsTheDate() {
        let purchase = projections.tx("1", purchase: t0, expires: t0 + 30 * day)
        let graceEnd = t0 + 36 * day
        let instants = [t0 + 29.5 * day, t0 + 30 * day, graceEnd - 1, graceEnd, t0 + 90 * day]
        #expect(
            statuses([purchase], [failure(grace: graceEnd)], at: instants)
                == [.active, .grace, .grace, .billingRetry, .expired])
        let before = projections.project([purchase], [failure(grace: graceEnd)], now: t0 + 29.5 * day)
        #expect(before?.graceExpiresAt == graceEnd, "the grace date is kept before the period ends")
        #expect(before?.advanced(to: t0 + 30 * day).nextChangeAt == graceEnd)
    }

    @Test func autoRenewOffExpiresAtExpiry() {
        let purchase = projections.tx("1", purchase: t0, expires: t0 + 30 * day)
        let off = projections.renewal(signed: t0 + 2 * day, autoRenew: false)
        #expect(statuses([purchase], [off], at: [t0 + 3 * day, t0 + 30 * day - 1, t0 + 30 * day]) == [.active, .active, .expired])
        #expect(statuses([purchase], [failure(grace: t0 + 36 * day, autoRenew: false)], at: [t0 + 31 * day]) == [.expired])
        #expect(projections.project([purchase], [off], now: t0 + 30 * day)?.nextChangeAt == nil, "nothing more by the clock")
    }

    @Test func aRenewalAfterTheFailureEndsTheRetry() {
        let purchase = projections.tx("1", purchase: t0, expires: t0 + 30 * day)
        let renewed = projections.tx("2", purchase: t0 + 32 * day, expires: t0 + 62 * day)
        let instants = [t0 + 33 * day, t0 + 62 * day]
        #expect(statuses([purchase, renewed], [failure(grace: nil)], at: instants) == [.active, .expired])
    }

    @Test func aRevocationIsFinalAndHasNoNextChange() {
        var refunded = projections.tx("1", purchase: t0, expires: t0 + 30 * day)
        refunded.revocationDate = t0 + 5 * day
        refunded.signedDate = t0 + 5 * day
        #expect(statuses([refunded], [failure(grace: t0 + 36 * day)], at: [t0 + 6 * day, t0 + 31 * day]) == [.revoked, .revoked])
        #expect(projections.project([refunded], [], now: t0 + 6 * day)?.nextChangeAt == nil)
    }

    /// Random chains: between two instants the row moves only at its next change, and the row the
    /// clock advances is the row the facts give.
    @Test func theNextChangeIsTheOnlyMomentTheStatusMoves() {
        var generator = ChainGenerator(state: 7)
        for _ in 0..<500 {
            let (transactions, renewals) = generator.facts(start: t0)
            let first = t0 + Double(generator.next(200 * 24)) * 3600
            let later = first + Double(generator.next(120 * 24)) * 3600
            guard let state = projections.project(transactions, renewals, now: first) else { continue }
            #expect(state.advanced(to: later) == projections.project(transactions, renewals, now: later))
            let timeline = state.timeline
            if let next = state.nextChangeAt {
                #expect(next > first)
                #expect(timeline.status(at: next) != state.status)
                #expect(timeline.status(at: next - 1) == state.status)
                if later < next { #expect(timeline.status(at: later) == state.status) }
            } else {
                #expect(timeline.status(at: later) == state.status)
            }
        }
    }

    @Test func aStoredRowKeepsItsStatusUntilItsNextChange() {
        let timeline = SubscriptionTimeline(
            revoked: false, expiresAt: t0, graceExpiresAt: nil, inBillingRetry: true, autoRenewEnabled: true)
        #expect(timeline.status(at: t0 + day, stored: .active, nextChangeAt: nil) == .active, "a row from before the clock")
        #expect(timeline.status(at: t0 - 1, stored: .active, nextChangeAt: t0) == .active)
        #expect(timeline.status(at: t0, stored: .active, nextChangeAt: t0) == .billingRetry)
    }
}
