// swift-tools-version:6.2
import PackageDescription

/// Settings shared by every Swift target: strict Swift 6 with the upcoming features the
/// swift-server projects we follow enable.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "subscriptions",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "ingress", targets: ["Ingress"]),
        .executable(name: "fulfillment", targets: ["Fulfillment"]),
        .executable(name: "subsctl", targets: ["Subsctl"]),
    ],
    targets: [
        // C libraries from Debian, one system module each; CShims holds the only C we write.
        .systemLibrary(
            name: "CPostgres", path: "Shared/System/CPostgres", pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]),
        .systemLibrary(
            name: "CRdKafka", path: "Shared/System/CRdKafka", pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]),
        .systemLibrary(
            name: "COpenSSL", path: "Shared/System/COpenSSL", pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "CMicroHTTPD", path: "Shared/System/CMicroHTTPD", pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(
            name: "CCurl", path: "Shared/System/CCurl", pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]),
        .target(name: "CShims", dependencies: ["CMicroHTTPD", "CCurl"], path: "Shared/System/CShims"),

        // Runtime: configuration, logging, metrics, service lifecycle. Pure Swift.
        .target(name: "ServiceRuntime", path: "Shared/ServiceRuntime", swiftSettings: swiftSettings),

        // Thin wrappers, the only modules that touch C APIs.
        .target(
            name: "Postgres", dependencies: ["CPostgres", "ServiceRuntime"], path: "Shared/Postgres",
            swiftSettings: swiftSettings),
        .target(
            name: "Kafka", dependencies: ["CRdKafka", "ServiceRuntime"], path: "Shared/Kafka",
            swiftSettings: swiftSettings),
        .target(
            name: "HTTPServer", dependencies: ["CMicroHTTPD", "CShims", "ServiceRuntime", "StrictJSON"],
            path: "Shared/HTTPServer", swiftSettings: swiftSettings),
        .target(
            name: "Crypto", dependencies: ["COpenSSL", "ServiceRuntime"], path: "Shared/Crypto",
            swiftSettings: swiftSettings),
        // Requests to URLs others chose (webhooks): libcurl with the address policy at every connect.
        .target(
            name: "OutboundHTTP", dependencies: ["CCurl", "CShims"], path: "Shared/OutboundHTTP",
            swiftSettings: swiftSettings),

        // Strict RFC 8259 JSON: a parser and a Decoder over its result, for the hot paths (Apple's
        // payloads in the verifier, the JSON documents the stores read from PostgreSQL). Pure Swift.
        .target(name: "StrictJSON", path: "Shared/StrictJSON", swiftSettings: swiftSettings),

        // Apple App Store: JWS verification and Apple's payload models (OpenSSL only via Crypto),
        // with the hand-written fast decoding of the notification payload over StrictJSON.
        .target(
            name: "AppStore", dependencies: ["Crypto", "ServiceRuntime", "StrictJSON"], path: "Shared/AppStore",
            swiftSettings: swiftSettings),

        // Storage: migrations and the stores, each the one writer of its tables (Shared/Storage/README.md
        // lists table -> store): chains, orders, users, consent, tasks, imports, events, audit, sessions.
        .target(
            name: "Storage", dependencies: ["Postgres", "ServiceRuntime", "Events", "Domain"], path: "Shared/Storage",
            exclude: ["README.md"], resources: [.copy("Migrations")], swiftSettings: swiftSettings),
        // Webhook endpoints' registration, secrets and signing, and their settings: what the ingress,
        // the worker's delivery and subsctl share, without the pipeline's Kafka.
        .target(
            name: "Webhooks", dependencies: ["Crypto", "Domain", "OutboundHTTP", "ServiceRuntime", "Storage"],
            path: "Shared/Webhooks", swiftSettings: swiftSettings),
        // What operators ask of Apple through the App Store Server API, recorded and audited (the mass
        // renewal-date extension): shared by the admin API and subsctl, without the pipeline's Kafka.
        .target(
            name: "AppleOperations", dependencies: ["AppStore", "Crypto", "Postgres", "ServiceRuntime", "Storage"],
            path: "Shared/AppleOperations", swiftSettings: swiftSettings),
        // The event pipeline shared by both services: settings, start-up, outbox relay, sweeper.
        .target(
            name: "Pipeline",
            dependencies: ["ServiceRuntime", "Postgres", "Kafka", "Storage", "Events", "Crypto", "AppStore", "Domain", "OutboundHTTP"],
            path: "Shared/Pipeline", swiftSettings: swiftSettings),
        // The domain core: projection, order state machine, notification matrix, credit rules. No I/O.
        .target(name: "Domain", path: "Shared/Domain", swiftSettings: swiftSettings),
        // The product catalogue: its JSON file format, applied by upsert into payment_product, and read back.
        .target(
            name: "Catalogue", dependencies: ["Domain", "Postgres", "Storage"], path: "Shared/Catalogue", exclude: ["README.md"],
            swiftSettings: swiftSettings),
        // Credits: every write to the credit tables (CreditLedger: balances, lots, ledger; CreditMeter:
        // usage; CreditJobs: bills, clearings, checks), on the caller's connection when it joins the
        // caller's transaction; its audit rows and chain marks through Storage's owners.
        .target(
            name: "Credits", dependencies: ["Postgres", "Domain", "ServiceRuntime", "Storage"], path: "Shared/Credits",
            swiftSettings: swiftSettings),
        // Event envelope shared by ingress and workers (the Kafka message schema).
        .target(name: "Events", path: "Shared/Events", exclude: ["Schemas"], swiftSettings: swiftSettings),

        // The two services: a library with all logic (testable) and a thin executable each.
        .target(
            name: "IngressApp",
            dependencies: [
                "ServiceRuntime", "Postgres", "Kafka", "HTTPServer", "Storage", "Events", "Pipeline", "Webhooks", "Crypto", "AppStore",
                "AppleOperations", "Domain", "Catalogue", "Credits", "StrictJSON", "OutboundHTTP",
            ],
            path: "Services/Ingress/App", resources: [.copy("openapi.json"), .copy("admin-openapi.json")], swiftSettings: swiftSettings),
        .executableTarget(
            name: "Ingress", dependencies: ["IngressApp"], path: "Services/Ingress/Main",
            swiftSettings: swiftSettings),
        .target(
            name: "FulfillmentApp",
            dependencies: [
                "ServiceRuntime", "Postgres", "Kafka", "HTTPServer", "Storage", "Events", "Pipeline", "Webhooks", "AppStore", "Crypto",
                "Domain", "Credits", "StrictJSON", "OutboundHTTP",
            ],
            path: "Services/Fulfillment/App", swiftSettings: swiftSettings),
        .executableTarget(
            name: "Fulfillment", dependencies: ["FulfillmentApp"], path: "Services/Fulfillment/Main",
            swiftSettings: swiftSettings),

        // Operations CLI: a library with every command, one file per subcommand, run in process by
        // its tests, and a thin executable. DemoSigner only for the local demo (`demo-signer`, `demo`,
        // `bench sign-notifications`).
        .target(
            name: "SubsctlCore",
            dependencies: [
                "AppStore", "DemoSigner", "Crypto", "ServiceRuntime", "Catalogue", "Domain", "Postgres", "Credits",
                "Storage", "Webhooks", "AppleOperations",
            ],
            path: "Services/Subsctl/Core", swiftSettings: swiftSettings),
        .executableTarget(
            name: "Subsctl", dependencies: ["SubsctlCore"], path: "Services/Subsctl/Main",
            swiftSettings: swiftSettings),

        // Benchmark peers and drivers (not tests): small servers measured by the scripts in
        // Tests/Benchmarks, and the open-loop load generator.
        .executableTarget(
            name: "BenchHTTPServer", dependencies: ["HTTPServer", "ServiceRuntime"],
            path: "Tests/Benchmarks/BenchHTTPServer", swiftSettings: swiftSettings),
        .executableTarget(
            name: "BenchLoad", dependencies: ["ServiceRuntime", "TestSupport"], path: "Tests/Benchmarks/BenchLoad", swiftSettings: swiftSettings),

        // Helpers for tests: the local services (with the broker tuning of their environment), process
        // control, HTTP client, throwaway migrated databases, scoped resources and the one polling helper.
        .target(
            name: "TestSupport", dependencies: ["ServiceRuntime", "Postgres", "Kafka", "Storage", "Domain", "Catalogue", "CCurl", "CShims"],
            path: "Tests/Support", swiftSettings: swiftSettings),

        // The demo signer: an Apple-like certificate chain made at run time (and its CAs' OCSP
        // answers) that signs App Store payloads, for the local demo and the tests. Only a
        // deployment with APPLE_IAP_ALLOW_TEST_ROOTS=true trusts it; the services never link it.
        // Issues certificates through OpenSSL with Crypto's package-level handles.
        .target(
            name: "DemoSigner", dependencies: ["AppStore", "Crypto", "COpenSSL"], path: "Shared/DemoSigner",
            swiftSettings: swiftSettings),

        // Test-only App Store peers: the mock App Store Server API and OCSP responders over
        // HTTP, serving what the demo signer signs (and re-exporting it).
        .target(
            name: "AppStoreTestSupport", dependencies: ["AppStore", "Crypto", "DemoSigner", "HTTPServer", "ServiceRuntime"],
            path: "Tests/AppStoreSupport",
            swiftSettings: swiftSettings),

        .testTarget(
            name: "ServiceRuntimeTests", dependencies: ["ServiceRuntime"], path: "Tests/ServiceRuntimeTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "PostgresTests", dependencies: ["Postgres", "Storage", "TestSupport"],
            path: "Tests/PostgresTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "KafkaTests", dependencies: ["Kafka", "TestSupport"], path: "Tests/KafkaTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "HTTPServerTests", dependencies: ["HTTPServer", "TestSupport"], path: "Tests/HTTPServerTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "DomainTests", dependencies: ["Domain"], path: "Tests/DomainTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "CryptoTests", dependencies: ["Crypto", "DemoSigner"], path: "Tests/CryptoTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutboundHTTPTests", dependencies: ["OutboundHTTP", "HTTPServer", "ServiceRuntime"], path: "Tests/OutboundHTTPTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "StrictJSONTests", dependencies: ["StrictJSON"], path: "Tests/StrictJSONTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "AppStoreTests", dependencies: ["AppStore", "AppStoreTestSupport", "Crypto", "ServiceRuntime", "TestSupport"],
            path: "Tests/AppStoreTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "CatalogueTests", dependencies: ["Catalogue", "Domain", "Postgres", "TestSupport"],
            path: "Tests/CatalogueTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "SubsctlTests",
            dependencies: ["SubsctlCore", "AppStoreTestSupport", "AppStore", "Crypto", "TestSupport", "Postgres", "ServiceRuntime"],
            path: "Tests/SubsctlTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "CreditsTests", dependencies: ["Credits", "Domain", "Postgres", "ServiceRuntime", "TestSupport"],
            path: "Tests/CreditsTests", swiftSettings: swiftSettings),
        // The ingress's routes called in process: a database per test, no broker, no socket.
        .testTarget(
            name: "IngressAppTests",
            dependencies: [
                "TestSupport", "Postgres", "Storage", "Events", "Pipeline", "IngressApp", "ServiceRuntime", "AppStore",
                "AppStoreTestSupport", "Crypto", "Catalogue", "Domain", "Credits", "HTTPServer",
            ],
            path: "Tests/IngressAppTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "TestSupport", "Postgres", "Kafka", "Storage", "Events", "Pipeline", "Webhooks", "IngressApp", "ServiceRuntime",
                "AppStore", "AppStoreTestSupport", "Crypto", "Catalogue", "Domain", "FulfillmentApp", "Credits",
                "OutboundHTTP",
            ],
            path: "Tests/EndToEndTests", swiftSettings: swiftSettings),
    ]
)
