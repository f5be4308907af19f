import Testing

@Test func cryptoPlaceholder() {}
