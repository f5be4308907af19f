import Dispatch
import Foundation
import FoundationNetworking
import ServiceRuntime
import Synchronization

/// Why an HTTP exchange produced no response.
package enum URLSessionExchangeFailure: Error, Sendable {
    case timedOut
    case transport(String)
}

/// One URLSession data task awaited from async code, cancelled when its time limit passes or
/// the calling task is cancelled (URLSession itself only knows an idle timeout).
///
/// `@unchecked Sendable`: every field is behind `state`'s lock; URLSessionTask.cancel is thread-safe.
package final class URLSessionExchange: @unchecked Sendable {
    private struct State {
        var task: URLSessionDataTask?
        var cancelled = false
        var timedOut = false
    }

    private let state = Mutex(State())

    private init() {}

    /// A URLSession timeout for `duration`: whole seconds, at least one. FoundationNetworking
    /// truncates timeouts to whole seconds (so 0.5 s would fire at once); the exchange's own
    /// timer enforces the exact limit.
    package static func wholeSeconds(_ duration: Duration) -> TimeInterval {
        max(1, (duration.inSeconds).rounded(.up))
    }

    package static func perform(_ request: URLRequest, on session: URLSession, limit: Duration) async
        -> Result<(Data, HTTPURLResponse), URLSessionExchangeFailure>
    {
        let exchange = URLSessionExchange()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let task = session.dataTask(with: request) { data, response, error in
                    continuation.resume(returning: exchange.finish(data: data, response: response, error: error))
                }
                exchange.start(task, limit: limit)
            }
        } onCancel: {
            exchange.cancel(timedOut: false)
        }
    }

    private func start(_ task: URLSessionDataTask, limit: Duration) {
        let cancelledAlready = state.withLock { state in
            state.task = task
            return state.cancelled
        }
        task.resume()
        if cancelledAlready { task.cancel() }
        let seconds = max(0, limit.inSeconds)
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [weak self] in self?.cancel(timedOut: true) }
    }

    private func cancel(timedOut: Bool) {
        let task = state.withLock { state in
            state.cancelled = true
            if timedOut && state.task != nil { state.timedOut = true }
            return state.task
        }
        task?.cancel()
    }

    private func finish(data: Data?, response: URLResponse?, error: (any Error)?)
        -> Result<(Data, HTTPURLResponse), URLSessionExchangeFailure>
    {
        let timedOut = state.withLock { state in
            state.task = nil
            state.cancelled = true
            return state.timedOut
        }
        if let error {
            let code = (error as? URLError)?.code
            if timedOut || code == .timedOut { return .failure(.timedOut) }
            if code == .cancelled { return .failure(.transport("request cancelled")) }
            return .failure(.transport(error.localizedDescription))
        }
        guard let http = response as? HTTPURLResponse else { return .failure(.transport("not an HTTP response")) }
        return .success((data ?? Data(), http))
    }
}
