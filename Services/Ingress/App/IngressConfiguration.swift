import Pipeline
import ServiceRuntime

/// Everything the ingress reads from its environment, validated at start-up.
public struct IngressConfiguration: Sendable {
    public var pipeline: PipelineConfiguration
    /// Listening port (`INGRESS_HTTP_PORT`). Default 8080.
    public var httpPort: Int
    /// Listening address (`INGRESS_HTTP_HOST`). Default 0.0.0.0.
    public var httpHost: String
    /// HTTP worker threads (`INGRESS_HTTP_THREADS`). Default 4.
    public var httpThreads: Int
    /// Largest accepted request body (`INGRESS_MAX_BODY_BYTES`). Default 256 KiB.
    public var maxBodyBytes: Int

    public init(reader: ConfigurationReader) {
        pipeline = PipelineConfiguration(reader: reader)
        httpPort = reader.int("INGRESS_HTTP_PORT", default: 8080, range: 0...65_535)
        httpHost = reader.string("INGRESS_HTTP_HOST", default: "0.0.0.0")
        httpThreads = reader.int("INGRESS_HTTP_THREADS", default: 4, range: 1...256)
        maxBodyBytes = reader.int("INGRESS_MAX_BODY_BYTES", default: 256 * 1024, range: 1024...64 * 1024 * 1024)
    }

    /// Reads and validates; throws one error listing every problem.
    public static func load(environment: [String: String]) throws(ConfigurationError) -> IngressConfiguration {
        let reader = ConfigurationReader(environment: environment)
        let configuration = IngressConfiguration(reader: reader)
        try reader.validate()
        return configuration
    }
}
