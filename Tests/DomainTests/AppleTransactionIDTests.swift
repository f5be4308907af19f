import Domain
import Testing

@Suite struct AppleTransactionIDTests {
    @Test func onlyDecimalDigitsUpToTheBoundAreApplesForm() {
        for valid in ["0", "1000000000000001", String(repeating: "9", count: AppleTransactionID.maxLength)] {
            #expect(AppleTransactionID.isValid(valid), "\(valid)")
        }
        let invalid = [
            "", "<b>1</b>", "12a", "-1", "+1", "1 2", " 1", "1.0", "١٢٣", "１２", "12\u{0}",
            String(repeating: "9", count: AppleTransactionID.maxLength + 1),
        ]
        for id in invalid { #expect(!AppleTransactionID.isValid(id), "\(id)") }
    }
}
