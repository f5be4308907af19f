import Testing

@Test func postgresPlaceholder() {}
