import Domain
import Testing

/// The worker's own event type for Apple's re-query answers applies its transaction like a
/// notification would; it is no Apple type, so it never shadows one.
@Suite struct StatusRequeryMatrixTests {
    @Test func aRequeryAnswerAppliesItsTransaction() {
        #expect(NotificationMatrix.action(type: NotificationMatrix.statusRequery, subtype: nil) == .applyTransaction(.renewal))
        #expect(FactSource.notification(type: NotificationMatrix.statusRequery, subtype: nil).cause == "apple.STATUS_REQUERY")
    }
}
