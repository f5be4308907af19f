import HTTPServer

/// The stable error codes of the REST contract (domain.md) with their HTTP statuses.
/// Clients key on `code`; `message` is for people and never carries secrets or payloads.
enum APIError {
    static func invalidRequest(_ message: String) -> HTTPError {
        HTTPError(status: 400, code: "INVALID_REQUEST", message: message)
    }
    static func unauthorized(_ message: String = "a valid bearer token is required") -> HTTPError {
        HTTPError(status: 401, code: "UNAUTHORIZED", message: message)
    }
    static func forbidden(_ message: String) -> HTTPError { HTTPError(status: 403, code: "FORBIDDEN", message: message) }
    static func notFound(_ message: String) -> HTTPError { HTTPError(status: 404, code: "NOT_FOUND", message: message) }
    static func unsupportedMediaType() -> HTTPError {
        HTTPError(status: 415, code: "UNSUPPORTED_MEDIA_TYPE", message: "Content-Type must be application/json")
    }
    static func rateLimited() -> HTTPError {
        HTTPError(
            status: 429, code: "RATE_LIMITED", message: "too many requests from this source; retry later",
            headers: [("Retry-After", "1")])
    }
    static func serviceUnavailable(_ message: String = "a dependency is unavailable; retry later") -> HTTPError {
        HTTPError(status: 503, code: "SERVICE_UNAVAILABLE", message: message)
    }

    static func productUnavailable(_ message: String) -> HTTPError {
        HTTPError(status: 422, code: "PRODUCT_UNAVAILABLE", message: message)
    }
    static func orderConflict(_ message: String) -> HTTPError {
        HTTPError(status: 409, code: "ORDER_CONFLICT", message: message)
    }
    static func changeDeferred(_ message: String) -> HTTPError {
        HTTPError(status: 409, code: "CHANGE_DEFERRED", message: message)
    }
    static func purchasePending(_ message: String) -> HTTPError {
        HTTPError(status: 409, code: "PURCHASE_PENDING", message: message)
    }
    static func transactionInvalid(_ message: String) -> HTTPError {
        HTTPError(status: 422, code: "TRANSACTION_INVALID", message: message)
    }
    static func transactionExpired(_ message: String) -> HTTPError {
        HTTPError(status: 422, code: "TRANSACTION_EXPIRED", message: message)
    }
    static func accountConflict(_ message: String) -> HTTPError {
        HTTPError(status: 409, code: "ACCOUNT_CONFLICT", message: message)
    }
    static func fulfillmentPending(_ message: String) -> HTTPError {
        HTTPError(status: 202, code: "FULFILLMENT_PENDING", message: message)
    }
    static func creditsExhausted(_ message: String) -> HTTPError {
        HTTPError(status: 402, code: "CREDITS_EXHAUSTED", message: message)
    }
    static func rateUnknown(_ message: String) -> HTTPError {
        HTTPError(status: 422, code: "RATE_UNKNOWN", message: message)
    }
    static func idempotencyConflict(_ message: String) -> HTTPError {
        HTTPError(status: 409, code: "IDEMPOTENCY_CONFLICT", message: message)
    }
}
