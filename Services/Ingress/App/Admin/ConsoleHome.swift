import Foundation
import HTTPServer
import ServiceRuntime
import Storage

extension Console {
    /// The home page: the search, then what needs a person now (DEAD events, unmatched facts,
    /// frozen chains, backlogs), each with the way to act on it.
    func home(_ context: AdminRequestContext) async throws -> HTTPResponse {
        let attention = try await routes.queue.attention(now: routes.clock.now())
        return ConsoleHTML.page(
            title: "Search", principal: context.principal, csrf: context.csrf, Self.searchForm() + Self.render(attention))
    }

    static func render(_ attention: Attention) -> HTML {
        guard !attention.isClear else {
            return ConsoleHTML.section("Needs attention", id: "attention", "<p class=\"ok\">Nothing needs attention.</p>")
        }
        func counts(_ byKey: [String: Int], _ what: String) -> [[HTML]] {
            byKey.sorted { $0.key < $1.key }.map { key, count in
                [HTML(key.isEmpty ? "–" : key), HTML(String("\(count) \(what)")), "<a href=\"/admin/queue\">queue</a>"]
            }
        }
        var rows = counts(attention.deadEvents, "DEAD events") + counts(attention.unmatchedFacts, "unmatched facts")
        if attention.waitingEvents > 0 {
            rows.append([
                "events waiting", HTML(String("\(attention.waitingEvents), the oldest for \(attention.oldestWaitingSeconds) s")),
                "<a href=\"/admin/queue\">queue</a>",
            ])
        }
        if attention.unpublishedInbound > 0 {
            rows.append([
                "inbound events not on the broker",
                HTML(String("\(attention.unpublishedInbound), the oldest for \(attention.oldestUnpublishedInboundSeconds) s")), "",
            ])
        }
        if attention.unpublishedOutbound > 0 {
            rows.append([
                "outbound events not on the broker",
                HTML(String("\(attention.unpublishedOutbound), the oldest for \(attention.oldestUnpublishedOutboundSeconds) s")), "",
            ])
        }
        if attention.frozenChainCount > 0 {
            rows.append(["frozen chains", HTML(String("\(attention.frozenChainCount)")), ""])
        }
        if attention.deadDeliveryCount > 0 {
            rows.append([
                "webhook deliveries", HTML(String("\(attention.deadDeliveryCount) DEAD deliveries")), "<a href=\"/admin/webhooks\">webhooks</a>",
            ])
        }
        if !attention.accountConflicts.isEmpty {
            rows.append(["account conflicts on paid charges", HTML(String("\(attention.accountConflicts.count)")), ""])
        }
        var html = ConsoleHTML.section(
            "Needs attention", id: "attention", ConsoleHTML.table(["what", "how many", "where"], rows, id: "attention-items"))
        if !attention.frozenChains.isEmpty {
            html += ConsoleHTML.section(
                "Frozen chains",
                ConsoleHTML.table(
                    ["chain", "user", "reason", "since", "case"],
                    attention.frozenChains.map { chain in
                        let encoded = chain.originalTransactionId.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
                        return [
                            HTML(String("\(chain.environment) \(chain.originalTransactionId)")), HTML(chain.userId), HTML(chain.reason),
                            HTML(ConsoleHTML.time(chain.since)), "<a href=\"/admin/case?q=\(encoded)\">open</a>",
                        ]
                    }, id: "frozen-chains"))
        }
        if !attention.deadDeliveries.isEmpty { html += deadDeliveries(attention.deadDeliveries) }
        if !attention.accountConflicts.isEmpty {
            html += ConsoleHTML.section(
                "Account conflicts",
                ConsoleHTML.table(
                    ["chain", "transaction", "paid by", "chain held by", "since", "case"],
                    attention.accountConflicts.map { conflict in
                        let encoded = conflict.transactionId.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
                        return [
                            HTML(String("\(conflict.environment) \(conflict.originalTransactionId)")),
                            HTML(String("\(conflict.transactionId) \(conflict.productId)")), HTML(conflict.payerUserId),
                            HTML(conflict.otherUserId), HTML(ConsoleHTML.time(conflict.since)),
                            "<a href=\"/admin/case?q=\(encoded)\">open</a>",
                        ]
                    }, id: "account-conflicts"))
        }
        return html
    }

    /// The newest DEAD deliveries, each leading to its user's case (where it can be retried) and
    /// to its endpoint's DEAD deliveries.
    static func deadDeliveries(_ deliveries: [Attention.DeadDelivery]) -> HTML {
        ConsoleHTML.section(
            "Dead webhook deliveries",
            ConsoleHTML.table(
                ["event", "type", "endpoint", "last answer", "user", "case"],
                deliveries.map { delivery in
                    let open: HTML = delivery.userId.map { "<a href=\"\(ConsoleHTML.caseHref($0))\">open</a>" } ?? ""
                    return [
                        HTML(delivery.eventId), HTML(delivery.type),
                        "<a href=\"\(ConsoleHTML.webhookHref(delivery.endpointId, status: "DEAD"))\">\(delivery.endpointId)</a>",
                        HTML(ConsoleHTML.lastAnswer(statusCode: delivery.lastStatusCode, error: delivery.lastError)),
                        HTML(delivery.userId ?? "–"), open,
                    ]
                }, id: "dead-deliveries"))
    }
}
