import HTTPServer
import OutboundHTTP
import ServiceRuntime
import Synchronization
import Testing

@Suite struct AddressPolicyTests {
    static let strict = AddressPolicy()

    @Test(arguments: [
        "https://127.0.0.1/hook", "https://127.8.9.10/", "https://10.1.2.3/", "https://172.16.0.1/", "https://172.31.255.255/",
        "https://192.168.1.1/", "https://169.254.169.254/latest/meta-data", "https://169.254.1.1/", "https://0.0.0.0/",
        "https://100.100.100.200/", "https://[::1]/", "https://[::]/", "https://[fc00::1]/", "https://[fd00:ec2::254]/",
        "https://[fe80::1]/", "https://[febf::1]/", "https://[::ffff:127.0.0.1]/", "https://[::ffff:10.0.0.1]/",
        "https://[::ffff:169.254.169.254]/", "https://[64:ff9b::a9fe:a9fe]/", "https://localhost/",
    ])
    func nonPublicAddressesAreRefusedAtRegistration(url: String) {
        let refusal = Self.strict.refusal(url: url)
        #expect(refusal?.contains("WEBHOOK_ALLOW_PRIVATE_NETWORKS") == true, "\(url): \(refusal ?? "accepted")")
        #expect(AddressPolicy(allowPrivateNetworks: true).refusal(url: url) == nil, "\(url)")
    }

    @Test(arguments: [
        "https://93.184.216.34/hook", "https://172.15.255.255/", "https://172.32.0.1/", "https://192.169.0.1/",
        "https://169.253.255.255/", "https://[2606:4700:4700::1111]/", "https://[2a00:1450:4001::1]:8443/x",
    ])
    func publicAddressesAreAccepted(url: String) {
        #expect(Self.strict.refusal(url: url) == nil, "\(url)")
    }

    @Test func plainHTTPNeedsItsSwitch() {
        #expect(Self.strict.refusal(url: "http://93.184.216.34/hook")?.contains("WEBHOOK_ALLOW_HTTP") == true)
        #expect(AddressPolicy(allowHTTP: true).refusal(url: "http://93.184.216.34/hook") == nil)
        #expect(AddressPolicy(allowHTTP: true).refusal(url: "http://127.0.0.1/hook") != nil)
        for bad in ["ftp://93.184.216.34/", "93.184.216.34/hook", "https:///nohost", "https://user:pw@93.184.216.34/", ""] {
            #expect(AddressPolicy(allowHTTP: true, allowPrivateNetworks: true).refusal(url: bad) != nil, "\(bad)")
        }
    }

    @Test func ipv4EmbeddedInIPv6IsJudgedByItsIPv4() throws {
        #expect(try #require(IPAddress("::ffff:8.8.8.8")).nonPublicRange == nil)
        #expect(try #require(IPAddress("::ffff:192.168.0.1")).nonPublicRange == "private")
        #expect(try #require(IPAddress("8.8.8.8")).nonPublicRange == nil)
        #expect(IPAddress("example.com") == nil)
    }

    /// A name that resolves to loopback passes nothing at connect time unless private networks are
    /// allowed: the request never reaches the listener; allowed, it does.
    @Test func connectTimeCheckRefusesANameResolvingToLoopback() async throws {
        let hits = Atomic<Int>(0)
        var router = Router()
        router.post("/hook") { _ in
            hits.add(1, ordering: .relaxed)
            return HTTPResponse(status: 204)
        }
        let server = HTTPServer(
            configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2), router: router,
            logger: Logger(label: "test", level: .warning))
        try server.start()
        let url = "http://localhost:\(server.port)/hook"

        let strict = try OutboundHTTPClient(policy: AddressPolicy(allowHTTP: true), timeout: .seconds(10))
        let refused = strict.post(url: url, headers: ["Content-Type: application/json"], body: Array("{}".utf8))
        #expect(refused.statusCode == nil)
        #expect(refused.error?.contains("a loopback address") == true, "\(refused)")
        #expect(hits.load(ordering: .relaxed) == 0)

        let open = try OutboundHTTPClient(policy: AddressPolicy(allowHTTP: true, allowPrivateNetworks: true), timeout: .seconds(10))
        let answered = open.post(url: url, headers: ["Content-Type: application/json"], body: Array("{}".utf8))
        #expect(answered == OutboundHTTPResult(statusCode: 204, error: nil))
        #expect(hits.load(ordering: .relaxed) == 1)

        // https only: the plain URL is refused by protocol before any connect.
        let httpsOnly = try OutboundHTTPClient(policy: AddressPolicy(allowPrivateNetworks: true), timeout: .seconds(10))
        #expect(httpsOnly.post(url: url, headers: [], body: []).statusCode == nil)
        #expect(hits.load(ordering: .relaxed) == 1)
        await server.shutdown()
    }
}
