import COpenSSL
import Foundation

/// Algorithm implementations fetched once from the default provider instead of on every call
/// (an implicit fetch per operation costs a method-store lookup under a lock in OpenSSL 3).
///
/// `@unchecked Sendable`: fetched EVP_MD / EVP_CIPHER objects are immutable and OpenSSL documents
/// them as safe to share between threads; they are never freed (process lifetime).
package struct FetchedAlgorithms: @unchecked Sendable {
    package let sha256: OpaquePointer
    let aes256GCM: OpaquePointer

    package static let shared = FetchedAlgorithms()

    private init() {
        guard let sha256 = EVP_MD_fetch(nil, "SHA256", nil), let gcm = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil) else {
            fatalError("OpenSSL default provider lacks SHA256 or AES-256-GCM: broken installation")
        }
        self.sha256 = sha256
        self.aes256GCM = gcm
    }
}

/// Runs `body` with a read-only memory BIO over `bytes`. Do not escape the BIO.
package func withReadOnlyBIO<R, E: Error>(_ bytes: [UInt8], _ body: (OpaquePointer) throws(E) -> R) throws(E) -> R {
    let result: Result<R, E> = bytes.withUnsafeBytes { raw in
        guard let bio = BIO_new_mem_buf(raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(raw.count)) else {
            fatalError("BIO_new_mem_buf failed: out of memory")
        }
        defer { BIO_free(bio) }
        do throws(E) { return .success(try body(bio)) } catch { return .failure(error) }
    }
    return try result.get()
}

/// Runs `body` with an empty growable memory BIO and returns what it wrote.
package func collectingBIO(_ body: (OpaquePointer) -> Bool) -> [UInt8]? {
    guard let bio = BIO_new(BIO_s_mem()) else { fatalError("BIO_new failed: out of memory") }
    defer { BIO_free(bio) }
    guard body(bio) else { return nil }
    var start: UnsafeMutablePointer<CChar>?
    let length = BIO_ctrl(bio, BIO_CTRL_INFO, 0, &start)
    guard length > 0, let start else { return [] }
    return start.withMemoryRebound(to: UInt8.self, capacity: length) { Array(UnsafeBufferPointer(start: $0, count: length)) }
}

/// A DER encoding produced by an `i2d_*` function (which allocates into `*out`).
package func derBytes(_ encode: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>) -> Int32) -> [UInt8]? {
    var out: UnsafeMutablePointer<UInt8>?
    let length = encode(&out)
    guard length > 0, let out else { return nil }
    defer { CRYPTO_free(out, #file, #line) }
    return Array(UnsafeBufferPointer(start: out, count: Int(length)))
}

/// `date` as a time_t, or nil outside years 1...9999 (which X.509 times can express) or when
/// not finite; converting such a value directly would trap.
package func unixTime(_ date: Date) -> time_t? {
    let seconds = date.timeIntervalSince1970.rounded(.down)
    guard seconds.isFinite, seconds >= -62_135_596_800, seconds < 253_402_300_800 else { return nil }
    return time_t(seconds)
}
