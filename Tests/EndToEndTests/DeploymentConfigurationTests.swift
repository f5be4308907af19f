import Foundation
import FulfillmentApp
import IngressApp
import ServiceRuntime
import TestSupport
import Testing

/// docker-compose.yml starts services that can start: it sets every variable their configuration
/// requires (a missing one stops the process at start-up), and a stack set up from .env.example
/// alone runs its workers without the App Store Connect API key. The rest of the compose file
/// (interpolation, healthchecks, volumes) is checked by deploy/check-deployment.py, whose checks
/// of operations (migrations in one place, autoscaled replicas, draining, trusted proxies, the
/// admin listener, scrape jobs, secrets from files) are shown here to catch what they are for.
@Suite(.timeLimit(.minutes(10))) struct DeploymentConfigurationTests {
    /// The shared service environment of the compose file (`&service-env`): name to raw value.
    static func composeServiceEnvironment() throws -> [String: String] {
        let text = try String(
            contentsOf: ServiceProcess.packageRoot.appendingPathComponent("docker-compose.yml"), encoding: .utf8)
        var environment: [String: String] = [:]
        var inBlock = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.contains("&service-env") {
                inBlock = true
            } else if inBlock, line.trimmingCharacters(in: .whitespaces).hasPrefix("#") {
                continue
            } else if inBlock {
                guard line.hasPrefix("      "), let colon = line.firstIndex(of: ":") else { break }
                let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                environment[line[..<colon].trimmingCharacters(in: .whitespaces)] =
                    value.hasPrefix("\"") ? String(value.dropFirst().dropLast()) : value
            }
        }
        return environment
    }

    /// `NAME=value` lines of .env.example.
    static func envExample() throws -> [String: String] {
        let text = try String(
            contentsOf: ServiceProcess.packageRoot.appendingPathComponent(".env.example"), encoding: .utf8)
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            values[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return values
    }

    /// Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?message}` with `.env`'s values (an
    /// empty value counts as unset, as compose's `:` forms say).
    static func interpolate(_ value: String, with env: [String: String]) -> String {
        guard value.hasPrefix("${"), value.hasSuffix("}") else { return value }
        let body = value.dropFirst(2).dropLast()
        let name = String(body.prefix { $0.isLetter || $0.isNumber || $0 == "_" })
        let rest = body.dropFirst(name.count)
        let fallback = rest.hasPrefix(":-") ? String(rest.dropFirst(2)) : ""
        return env[name].flatMap { $0.isEmpty ? nil : $0 } ?? fallback
    }

    @Test func composeSetsEveryRequiredVariable() throws {
        let names = Set(try Self.composeServiceEnvironment().keys)
        #expect(names.contains("DATABASE_URL") && names.contains("APPLE_IAP_ENV"), "\(names.sorted())")
        // Values do not matter here, only which variables are missing.
        let environment = Dictionary(uniqueKeysWithValues: names.map { ($0, "x") })
        var missing: [String] = []
        do { _ = try IngressConfiguration.load(environment: environment) } catch {
            missing += error.problems.filter { $0.value == nil && !names.contains($0.name) }.map(\.name)
        }
        do { _ = try FulfillmentConfiguration.load(environment: environment) } catch {
            missing += error.problems.filter { $0.value == nil && !names.contains($0.name) }.map(\.name)
        }
        #expect(missing.isEmpty, "docker-compose.yml lacks \(Set(missing).sorted())")
    }

    /// The issue a first-time user met: compose always set APPLE_IAP_PRIVATE_KEY_PATH, so the
    /// worker demanded the issuer and key ids and stopped. As .env.example comes, no key setting
    /// reaches the worker and its schedulers run without the API (and say so in a warning).
    @Test func workerStartsFromEnvExampleWithoutTheAPIKey() throws {
        let env = try Self.envExample()
        let environment = try Self.composeServiceEnvironment().mapValues { Self.interpolate($0, with: env) }
        for name in ["APPLE_IAP_ISSUER_ID", "APPLE_IAP_KEY_ID", "APPLE_IAP_PRIVATE_KEY_PATH"] {
            #expect(environment[name] == "", "\(name) reaches the worker as '\(environment[name] ?? "nil")'")
        }
        let reader = ConfigurationReader(environment: environment.filter { !$0.value.isEmpty })
        let schedulers = SchedulerConfiguration(reader: reader)
        #expect(schedulers.appStoreAPI == nil)
        #expect(reader.problems.isEmpty, "\(reader.problems)")
        // With the key named, the ids become required: half a key is an error, not a silent nil.
        var withKey = environment.filter { !$0.value.isEmpty }
        withKey["APPLE_IAP_PRIVATE_KEY_PATH"] = "/run/secrets/subs/key.p8"
        let halfReader = ConfigurationReader(environment: withKey)
        _ = SchedulerConfiguration(reader: halfReader)
        #expect(Set(halfReader.problems.map(\.name)).isSuperset(of: ["APPLE_IAP_ISSUER_ID", "APPLE_IAP_KEY_ID"]))
    }

    /// The compose ingress behind the proxy trusts it, listens for the support console on the
    /// network and gets its tokens.
    @Test func composeIngressTrustsTheProxyAndOpensTheConsole() throws {
        var env = try Self.envExample()
        env["ADMIN_TOKENS"] = "alice:operator:" + String(repeating: "a", count: 32)
        let environment = try Self.composeServiceEnvironment().mapValues { Self.interpolate($0, with: env) }
        #expect(environment["INGRESS_TRUSTED_PROXIES"] == env["SUBS_EDGE_SUBNET"])
        #expect(environment["MIGRATE_ON_START"] == "false")
        let reader = ConfigurationReader(environment: environment.filter { !$0.value.isEmpty })
        let settings = IngressConfiguration(reader: reader)
        #expect(!settings.trustedProxies.isEmpty)
        #expect(settings.admin.isEnabled && settings.admin.host == "0.0.0.0")
    }

    /// One mistake each of the kind issue #26 found in the shipped files, and what the check says.
    static let mistakes: [(file: String, from: String, to: String, says: String)] = [
        (
            "deploy/docker/Dockerfile", "COPY deploy/local/libmicrohttpd-patches /tmp/libmicrohttpd-patches\n", "",
            "does not give build-libmicrohttpd.sh its patches"
        ),
        (
            "deploy/k8s/base/ingress-deployment.yaml", "  progressDeadlineSeconds: 3600\n", "  replicas: 2\n",
            "Deployment ingress sets replicas although an autoscaler owns them"
        ),
        ("deploy/k8s/base/ingress-deployment.yaml", #"command: ["sleep", "5"]"#, #"command: ["true"]"#, "without a preStop pause"),
        ("deploy/k8s/base/configmap.yaml", #"MIGRATE_ON_START: "false""#, #"MIGRATE_ON_START: "true""#, "the services migrate on start"),
        ("deploy/k8s/base/configmap.yaml", "  INGRESS_TRUSTED_PROXIES: 10.0.0.0/8\n", "", "deploy/k8s/base: INGRESS_TRUSTED_PROXIES is not set"),
        ("deploy/k8s/overlays/example/kustomization.yaml", "      - release=0.1.0", "      - release=0.0.9", "has release '0.0.9'"),
        ("deploy/k8s/overlays/example/kustomization.yaml", "configurations:\n  - nameref.yaml\n", "", "does not carry the hashed name"),
        (
            "deploy/k8s/monitoring/podmonitor.yaml", "subs.example.com/job: subs-fulfillment", "subs.example.com/job: fulfillment",
            "matches job 'subs-fulfillment'"
        ),
        ("docker-compose.yml", "      INGRESS_TRUSTED_PROXIES: ${SUBS_EDGE_SUBNET:-172.30.250.0/24}\n", "", "no INGRESS_TRUSTED_PROXIES"),
        (
            "docker-compose.yml", "      migrate: { condition: service_completed_successfully }\n      init:", "      init:",
            "compose service ingress does not wait for `migrate`"
        ),
        ("deploy/UPGRADING.md", "`ADMIN_TOKENS_FILE`", "ADMIN_TOKENS as a file", "does not document ADMIN_TOKENS_FILE"),
        (
            "deploy/observability/alerts.yml", "increase(subs_credit_job_failures_total[15m])", "increase(subs_credit_grants_total[15m])",
            "no alert watches credit job failures"
        ),
    ]

    /// deploy/check-deployment.py on a copy of the deployment files with `edit` applied: its exit
    /// status and what it printed.
    static func check(editing edit: (file: String, from: String, to: String)?) async throws -> (status: Int32?, output: String) {
        let root = ServiceProcess.packageRoot
        let state = ServiceProcess.localState
        let tools = (
            python: state.appendingPathComponent("venv/bin/python").path, promtool: state.appendingPathComponent("bin/promtool").path,
            validator: state.appendingPathComponent("venv/bin/kubernetes-validate").path
        )
        for tool in [tools.python, tools.promtool, tools.validator] {
            try #require(FileManager.default.isExecutableFile(atPath: tool), "\(tool) (deploy/local/install.sh installs it)")
        }
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("deploy-check-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: copy, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: copy) }
        for item in ["docker-compose.yml", ".env.example", "deploy"] {
            try FileManager.default.copyItem(at: root.appendingPathComponent(item), to: copy.appendingPathComponent(item))
        }
        // The sources are only read (metric names, the secret settings).
        for item in ["Shared", "Services"] {
            try FileManager.default.createSymbolicLink(at: copy.appendingPathComponent(item), withDestinationURL: root.appendingPathComponent(item))
        }
        if let edit {
            let file = copy.appendingPathComponent(edit.file)
            let text = try String(contentsOf: file, encoding: .utf8)
            try #require(text.contains(edit.from), "\(edit.file) no longer contains \(edit.from)")
            try text.replacingOccurrences(of: edit.from, with: edit.to).write(to: file, atomically: true, encoding: .utf8)
        }
        let process = try ServiceProcess(
            executablePath: tools.python, name: "deploy-check",
            arguments: [
                copy.appendingPathComponent("deploy/check-deployment.py").path, "--promtool", tools.promtool,
                "--kubernetes-validate", tools.validator,
            ], environment: [:])
        let status = await process.waitForExit(timeout: 240)
        return (status, process.output)
    }

    @Test func theShippedFilesPassTheCheck() async throws {
        let result = try await Self.check(editing: nil)
        #expect(result.status == 0, "\(result.output)")
    }

    @Test(arguments: mistakes.indices) func theCheckCatches(mistake index: Int) async throws {
        let mistake = Self.mistakes[index]
        let result = try await Self.check(editing: (mistake.file, mistake.from, mistake.to))
        #expect(result.status == 1, "\(mistake.says): \(result.output)")
        #expect(result.output.contains(mistake.says), "\(result.output)")
    }
}
