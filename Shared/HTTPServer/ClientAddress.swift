import Foundation

/// An IPv4 or IPv6 network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`; a bare address is
/// the network of that one address).
public struct AddressRange: Sendable, Equatable, CustomStringConvertible {
    private let network: [UInt8]
    private let prefixLength: Int
    public let description: String

    /// Nil when `cidr` is not a numeric address with an optional prefix length that fits it.
    public init?(cidr: String) {
        let parts = cidr.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = Self.bytes(of: String(parts[0])) else { return nil }
        let bits = address.count * 8
        let length: Int
        if parts.count == 2 {
            guard let parsed = Int(parts[1]), (0...bits).contains(parsed), parts[1].allSatisfy(\.isASCII) else { return nil }
            length = parsed
        } else {
            length = bits
        }
        network = Self.masked(address, length)
        prefixLength = length
        description = cidr
    }

    /// Whether `address` (numeric, as a peer address is reported) lies in this network.
    public func contains(_ address: String) -> Bool {
        guard let bytes = Self.bytes(of: address), bytes.count == network.count else { return false }
        return Self.masked(bytes, prefixLength) == network
    }

    /// The address's bytes: 4 for IPv4, 16 for IPv6 (an IPv4-mapped IPv6 address counts as IPv4).
    static func bytes(of address: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, address, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF { return Array(bytes[12...]) }
        return bytes
    }

    private static func masked(_ bytes: [UInt8], _ length: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let keep = min(max(length - index * 8, 0), 8)
            return keep == 8 ? byte : byte & ~(UInt8(0xFF) >> keep)
        }
    }
}

/// Who sent a request: the TCP peer, or, when the peer is one of the trusted proxies, the
/// client those proxies name in `X-Forwarded-For`.
public enum ClientAddress {
    /// Walks `X-Forwarded-For` from the right (each trusted proxy appends the address it saw)
    /// and takes the first entry that is not itself a trusted proxy; an entry that is not an IP
    /// address stops the walk (a client can write anything on the left). The peer when it is not
    /// trusted, or when the header names no one usable.
    public static func resolve(peer: String, forwardedFor: String?, trustedProxies: [AddressRange]) -> String {
        guard !trustedProxies.isEmpty, isTrusted(peer, trustedProxies), let forwardedFor else { return peer }
        var client = peer
        for entry in forwardedFor.split(separator: ",").reversed() {
            let address = entry.trimmingCharacters(in: .whitespaces)
            guard AddressRange.bytes(of: address) != nil else { break }
            client = address
            if !isTrusted(address, trustedProxies) { break }
        }
        return client
    }

    public static func isTrusted(_ address: String, _ trustedProxies: [AddressRange]) -> Bool {
        trustedProxies.contains { $0.contains(address) }
    }
}
