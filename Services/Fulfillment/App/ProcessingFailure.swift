/// Why an attempt at an event or at a task (re-query, recovery) stopped, and how it continues.
public enum ProcessingFailure: Error, Sendable {
    /// Later may work (database, network, Apple 429/5xx, OCSP): retried with backoff. The code
    /// names the error class.
    case retryable(code: String, message: String)
    /// Never works as asked (bad signature, wrong app, unknown transaction): the event is DEAD, the
    /// task FAILED, at once.
    case permanent(code: String, message: String)
    /// Another worker holds it now and carries on (from the task's last checkpoint).
    case leaseLost
}
