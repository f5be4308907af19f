import Testing

@Test func kafkaPlaceholder() {}
