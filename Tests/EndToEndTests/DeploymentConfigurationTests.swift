import Foundation
import FulfillmentApp
import IngressApp
import ServiceRuntime
import TestSupport
import Testing

/// docker-compose.yml starts services that can start: it sets every variable their configuration
/// requires (a missing one stops the process at start-up), and a stack set up from .env.example
/// alone runs its workers without the App Store Connect API key. The rest of the compose file
/// (interpolation, healthchecks, volumes) is checked by deploy/check-deployment.py.
@Suite struct DeploymentConfigurationTests {
    /// The shared service environment of the compose file (`&service-env`): name to raw value.
    static func composeServiceEnvironment() throws -> [String: String] {
        let text = try String(
            contentsOf: ServiceProcess.packageRoot.appendingPathComponent("docker-compose.yml"), encoding: .utf8)
        var environment: [String: String] = [:]
        var inBlock = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.contains("&service-env") {
                inBlock = true
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
}
