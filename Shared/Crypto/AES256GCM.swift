import COpenSSL

/// AES-256-GCM authenticated encryption with a random 96-bit nonce per message.
///
/// Sealed form: `nonce (12) || ciphertext || tag (16)`. With random nonces one key must not seal
/// more than about 2^32 messages (NIST SP 800-38D §8.3); rotate keys well before that.
public struct AES256GCM: Sendable {
    public static let keyByteCount = 32
    public static let nonceByteCount = 12
    public static let tagByteCount = 16

    public static func seal(_ plaintext: [UInt8], key: [UInt8], aad: [UInt8] = []) throws(CryptoError) -> [UInt8] {
        try checkKey(key)
        let nonce = SecureRandom.bytes(nonceByteCount)
        let context = try CipherContext()
        guard EVP_EncryptInit_ex2(context.handle, FetchedAlgorithms.shared.aes256GCM, key, nonce, nil) == 1 else {
            throw .openSSL(.internalFailure, "AES-GCM encrypt init failed")
        }
        try context.feedAAD(aad)
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count)
        var written: Int32 = 0
        if !plaintext.isEmpty {
            guard EVP_EncryptUpdate(context.handle, &ciphertext, &written, plaintext, Int32(plaintext.count)) == 1,
                Int(written) == plaintext.count
            else { throw .openSSL(.internalFailure, "AES-GCM encrypt failed") }
        }
        var finalBytes = [UInt8](repeating: 0, count: 16)
        var tag = [UInt8](repeating: 0, count: tagByteCount)
        guard EVP_EncryptFinal_ex(context.handle, &finalBytes, &written) == 1, written == 0,
            EVP_CIPHER_CTX_ctrl(context.handle, EVP_CTRL_AEAD_GET_TAG, Int32(tagByteCount), &tag) == 1
        else { throw .openSSL(.internalFailure, "AES-GCM finalisation failed") }
        return nonce + ciphertext + tag
    }

    public static func open(_ sealed: [UInt8], key: [UInt8], aad: [UInt8] = []) throws(CryptoError) -> [UInt8] {
        try checkKey(key)
        guard sealed.count >= nonceByteCount + tagByteCount else {
            throw CryptoError(.invalidInput, "sealed box shorter than nonce and tag")
        }
        let nonce = Array(sealed.prefix(nonceByteCount))
        var tag = Array(sealed.suffix(tagByteCount))
        let ciphertext = Array(sealed[nonceByteCount..<(sealed.count - tagByteCount)])
        let context = try CipherContext()
        guard EVP_DecryptInit_ex2(context.handle, FetchedAlgorithms.shared.aes256GCM, key, nonce, nil) == 1 else {
            throw .openSSL(.internalFailure, "AES-GCM decrypt init failed")
        }
        try context.feedAAD(aad)
        var plaintext = [UInt8](repeating: 0, count: ciphertext.count)
        var written: Int32 = 0
        if !ciphertext.isEmpty {
            guard EVP_DecryptUpdate(context.handle, &plaintext, &written, ciphertext, Int32(ciphertext.count)) == 1 else {
                throw .openSSL(.internalFailure, "AES-GCM decrypt failed")
            }
        }
        var finalBytes = [UInt8](repeating: 0, count: 16)
        guard EVP_CIPHER_CTX_ctrl(context.handle, EVP_CTRL_AEAD_SET_TAG, Int32(tagByteCount), &tag) == 1 else {
            throw .openSSL(.internalFailure, "AES-GCM set tag failed")
        }
        guard EVP_DecryptFinal_ex(context.handle, &finalBytes, &written) == 1 else {
            OpenSSLErrorQueue.clear()
            // Never hand out unauthenticated plaintext.
            plaintext.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
            throw CryptoError(.authenticationFailure, "AES-GCM tag mismatch: wrong key, wrong AAD or tampered data")
        }
        return plaintext
    }

    private static func checkKey(_ key: [UInt8]) throws(CryptoError) {
        guard key.count == keyByteCount else {
            throw CryptoError(.invalidKey, "AES-256 needs a \(keyByteCount)-byte key, got \(key.count)")
        }
    }
}

/// Owns one EVP_CIPHER_CTX for the duration of one seal/open call (never shared).
private final class CipherContext {
    let handle: OpaquePointer

    init() throws(CryptoError) {
        guard let handle = EVP_CIPHER_CTX_new() else { throw .openSSL(.internalFailure, "EVP_CIPHER_CTX_new failed") }
        self.handle = handle
    }

    deinit { EVP_CIPHER_CTX_free(handle) }

    func feedAAD(_ aad: [UInt8]) throws(CryptoError) {
        guard !aad.isEmpty else { return }
        var ignored: Int32 = 0
        guard EVP_CipherUpdate(handle, nil, &ignored, aad, Int32(aad.count)) == 1 else {
            throw .openSSL(.internalFailure, "AES-GCM AAD failed")
        }
    }
}
