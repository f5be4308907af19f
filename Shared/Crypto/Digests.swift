import COpenSSL

/// SHA-256 (FIPS 180-4).
public enum SHA256 {
    public static let byteCount = 32

    public static func hash(_ data: [UInt8]) -> [UInt8] {
        data.withUnsafeBytes { hash($0) }
    }

    public static func hash(_ data: some Sequence<UInt8>) -> [UInt8] {
        if let digest = data.withContiguousStorageIfAvailable({ hash(UnsafeRawBufferPointer($0)) }) { return digest }
        return hash(Array(data))
    }

    /// The digest of raw bytes. Do not escape the pointer.
    public static func hash(_ data: UnsafeRawBufferPointer) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: byteCount)
        var length: UInt32 = 0
        let ok = digest.withUnsafeMutableBufferPointer { out in
            EVP_Digest(data.baseAddress, data.count, out.baseAddress, &length, FetchedAlgorithms.shared.sha256, nil)
        }
        // Only an allocation failure makes a one-shot SHA-256 fail.
        guard ok == 1, length == UInt32(byteCount) else { fatalError("EVP_Digest(SHA256) failed") }
        return digest
    }
}

/// SHA-256 of messages that all start with the same prefix, the prefix absorbed once: a JWS
/// signing input starts with its protected header, identical for every payload Apple signs
/// with one certificate chain (about a third of a notification's bytes).
///
/// `@unchecked Sendable`: the digest context is filled in `init` and afterwards only copied
/// (EVP_MD_CTX_copy_ex reads its source), each hash working on its own copy.
public final class SHA256Prefix: @unchecked Sendable {
    private let context: OpaquePointer

    /// Absorbs `prefix`. Do not escape the pointer.
    public init(_ prefix: UnsafeRawBufferPointer) {
        guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed: out of memory") }
        guard EVP_DigestInit_ex(context, FetchedAlgorithms.shared.sha256, nil) == 1,
            EVP_DigestUpdate(context, prefix.baseAddress, prefix.count) == 1
        else { fatalError("SHA-256 init/update failed: \(OpenSSLErrorQueue.drain() ?? "no detail")") }
        self.context = context
    }

    deinit { EVP_MD_CTX_free(context) }

    /// SHA-256(prefix || suffix). Do not escape the pointer.
    public func hash(appending suffix: UnsafeRawBufferPointer) -> [UInt8] {
        guard let copy = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed: out of memory") }
        defer { EVP_MD_CTX_free(copy) }
        var digest = [UInt8](repeating: 0, count: SHA256.byteCount)
        var length: UInt32 = 0
        let ok =
            EVP_MD_CTX_copy_ex(copy, context) == 1 && EVP_DigestUpdate(copy, suffix.baseAddress, suffix.count) == 1
            && digest.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(copy, $0.baseAddress, &length) } == 1
        // Only an allocation failure makes SHA-256 fail.
        guard ok, length == UInt32(SHA256.byteCount) else { fatalError("SHA-256 continuation failed") }
        return digest
    }
}

/// HMAC with SHA-256 (RFC 2104).
public enum HMACSHA256 {
    public static func authenticate(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var mac = [UInt8](repeating: 0, count: SHA256.byteCount)
        var length = 0
        let result = key.withUnsafeBytes { key in
            message.withUnsafeBytes { message in
                mac.withUnsafeMutableBytes { out in
                    EVP_Q_mac(
                        nil, "HMAC", nil, "SHA256", nil,
                        key.baseAddress ?? UnsafeRawPointer(bitPattern: 1), key.count,
                        message.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count,
                        out.baseAddress?.assumingMemoryBound(to: UInt8.self), out.count, &length)
                }
            }
        }
        guard result != nil, length == SHA256.byteCount else { fatalError("EVP_Q_mac(HMAC-SHA256) failed") }
        return mac
    }
}

/// Compares two byte strings in time that depends only on their lengths (lengths are not secret).
public func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    if a.isEmpty { return true }
    return a.withUnsafeBytes { a in b.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, a.count) == 0 } }
}

/// Bytes from OpenSSL's CSPRNG.
public enum SecureRandom {
    /// `n` random bytes. A failing CSPRNG is not recoverable (no entropy), so it stops the process.
    public static func bytes(_ n: Int) -> [UInt8] {
        precondition(n >= 0, "negative byte count")
        var out = [UInt8](repeating: 0, count: n)
        if n == 0 { return out }
        let ok = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) }
        guard ok == 1 else { fatalError("RAND_bytes failed: CSPRNG unavailable") }
        return out
    }
}
