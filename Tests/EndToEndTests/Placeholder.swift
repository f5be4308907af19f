import Testing

@Test func endtoendPlaceholder() {}
