import Foundation

/// Runs `body` with the resource `make` returns, then `cleanUp` on it, awaited, whether `body`
/// returned or threw: a test's pools, databases and servers never outlive it.
@discardableResult
public func withResource<Resource, Result>(
    _ make: () async throws -> Resource, cleanUp: (Resource) async -> Void, _ body: (Resource) async throws -> Result
) async throws -> Result {
    let resource = try await make()
    let result: Result
    do {
        result = try await body(resource)
    } catch {
        await cleanUp(resource)
        throw error
    }
    await cleanUp(resource)
    return result
}

/// Runs `body` with a fresh migrated database named after `prefix` (see `TestDatabase.make`),
/// closed after it, also when it throws (see `TestDatabase.close` for when it is dropped).
@discardableResult
public func withTestDatabase<Result>(_ prefix: String = "test", _ body: (TestDatabase) async throws -> Result) async throws -> Result {
    try await withResource({ try await TestDatabase.make(prefix) }, cleanUp: { await $0.close() }, body)
}

/// Runs blocking code (sockets, waiting for a child process) on a thread of its own: on two cores
/// the Swift concurrency pool has two threads, and a test holding them stalls every other test of
/// the process (their deadlines then run out). Each concurrent caller gets a real thread.
public func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
