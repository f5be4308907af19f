import Testing

@Test func serviceruntimePlaceholder() {}
