import Foundation
import FulfillmentApp
import IngressApp
import ServiceRuntime
import TestSupport
import Testing

/// docker-compose.yml starts services that can start: it sets every variable their configuration
/// requires (a missing one stops the process at start-up).
@Suite struct DeploymentConfigurationTests {
    /// The variable names of the compose file's shared service environment (`&service-env`).
    static func composeServiceVariables() throws -> Set<String> {
        let text = try String(
            contentsOf: ServiceProcess.packageRoot.appendingPathComponent("docker-compose.yml"), encoding: .utf8)
        var names: Set<String> = []
        var inBlock = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.contains("&service-env") {
                inBlock = true
            } else if inBlock {
                guard line.hasPrefix("      "), let colon = line.firstIndex(of: ":") else { break }
                names.insert(line[..<colon].trimmingCharacters(in: .whitespaces))
            }
        }
        return names
    }

    @Test func composeSetsEveryRequiredVariable() throws {
        let names = try Self.composeServiceVariables()
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
}
