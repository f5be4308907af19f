import ServiceRuntime
import Testing

/// The services' command line, answered in process: the options, the configuration check and the
/// refusal of anything else, none of them starting the service.
@Suite struct ServiceCommandLineTests {
    /// A configuration of one required setting, read the way the services read theirs.
    struct Settings {
        var port: Int

        static func load(environment: [String: String]) throws(ConfigurationError) -> Settings {
            let reader = ConfigurationReader(environment: environment)
            _ = reader.requiredString("NAME", expected: "a name")
            let settings = Settings(port: reader.int("PORT", default: 80, range: 1...65_535))
            try reader.validate()
            return settings
        }
    }

    let commandLine = ServiceCommandLine(name: "probe", purpose: "A service of the tests.", load: Settings.load(environment:))

    @Test func noArgumentStarts() {
        #expect(commandLine.answer([], environment: [:]) == nil)
    }

    @Test func versionIsTheBuildsLine() throws {
        let answer = try #require(commandLine.answer(["--version"], environment: [:]))
        #expect(answer.status == 0 && answer.error.isEmpty)
        #expect(answer.output == "probe \(BuildInfo.version) (revision \(BuildInfo.revision))\n")
        #expect(answer.output == BuildInfo.versionLine(of: "probe") + "\n")
    }

    @Test(arguments: ["--help", "-h"])
    func helpSaysWhatItIsAndWhereTheSettingsAre(option: String) throws {
        let answer = try #require(commandLine.answer([option], environment: [:]))
        #expect(answer.status == 0 && answer.error.isEmpty)
        #expect(answer.output.hasPrefix("usage: probe [--check-config | --version | --help]"))
        #expect(answer.output.contains("A service of the tests."))
        #expect(answer.output.contains("environment variable") && answer.output.contains("README.md"))
    }

    @Test func checkConfigPrintsEveryProblemOrOk() throws {
        let bad = try #require(commandLine.answer(["--check-config"], environment: ["PORT": "http"]))
        #expect(bad.status == 2 && bad.output.isEmpty)
        #expect(bad.error.contains("NAME: missing; expected a name"), "\(bad.error)")
        #expect(bad.error.contains("PORT: invalid value 'http'"), "\(bad.error)")
        let good = try #require(commandLine.answer(["--check-config"], environment: ["NAME": "x", "PORT": "8080"]))
        #expect(good.status == 0 && good.output == "configuration ok\n" && good.error.isEmpty)
    }

    @Test(arguments: [["--port", "8080"], ["start"], ["--version", "--help"], ["--check-config", "extra"]])
    func anythingElseIsAUsageError(arguments: [String]) throws {
        let answer = try #require(commandLine.answer(arguments, environment: ["NAME": "x"]))
        #expect(answer.status == 2 && answer.output.isEmpty)
        #expect(answer.error.hasPrefix("probe: "), "\(answer.error)")
        #expect(answer.error.contains("usage: probe"))
    }
}
