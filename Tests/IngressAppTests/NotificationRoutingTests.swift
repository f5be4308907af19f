import Crypto
import Pipeline
import Storage
import Testing

/// The partition a notification goes to is read from its nested transaction without verifying
/// it, through the one compact-JWS split; anything else routes by notification UUID.
@Suite struct NotificationRoutingTests {
    static func token(_ claims: String) -> String {
        Base64URL.encode(Array(#"{"alg":"ES256"}"#.utf8)) + "." + Base64URL.encode(Array(claims.utf8)) + ".c2ln"
    }

    @Test func theNestedTransactionsIdsChooseThePartition() {
        let ids = NewNotificationEvent.routingIdentifiers(
            of: Self.token(#"{"transactionId":"2000000000000002","originalTransactionId":"2000000000000001"}"#))
        #expect(ids.transactionID == "2000000000000002" && ids.originalTransactionID == "2000000000000001")
    }

    @Test func anythingElseRoutesByTheNotification() {
        let valid = Self.token(#"{"originalTransactionId":"1"}"#)
        for token in [nil, "", "a.b", valid + ".d", "x.!!!.y", Self.token("not json"), Self.token(#"{"originalTransactionId":"<b>"}"#)] {
            let ids = NewNotificationEvent.routingIdentifiers(of: token)
            #expect(ids.originalTransactionID == nil, "\(token ?? "nil")")
        }
    }
}
