import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Which addresses a request to a URL someone else chose may reach: by default only public ones,
/// so a registered URL cannot make us call our own network (loopback, private, link-local, the
/// cloud metadata address). Checked when a URL is registered and again at every connect, since a
/// name may resolve elsewhere by then.
public struct AddressPolicy: Sendable, Equatable {
    /// `http://` URLs too (`WEBHOOK_ALLOW_HTTP`); otherwise only `https://`.
    public var allowHTTP: Bool
    /// Loopback, private, link-local and metadata addresses too (`WEBHOOK_ALLOW_PRIVATE_NETWORKS`).
    public var allowPrivateNetworks: Bool

    public init(allowHTTP: Bool = false, allowPrivateNetworks: Bool = false) {
        self.allowHTTP = allowHTTP
        self.allowPrivateNetworks = allowPrivateNetworks
    }

    /// Why `address` is refused (e.g. "loopback"), or nil when the policy lets it through.
    public func refusal(_ address: IPAddress) -> String? {
        allowPrivateNetworks ? nil : address.nonPublicRange
    }

    /// Why `url` is refused, or nil: its scheme, its form, and every address its host resolves to.
    /// Resolves the name (blocking: call it off the cooperative pool for names).
    public func refusal(url text: String) -> String? {
        guard text.utf8.count <= 2048, let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(),
            let host = url.host, !host.isEmpty
        else { return "url must be an absolute http(s) URL of at most 2048 characters" }
        switch scheme {
        case "https": break
        case "http" where allowHTTP: break
        case "http": return "url must use https (http:// needs WEBHOOK_ALLOW_HTTP=true)"
        default: return "url must use https"
        }
        if url.user != nil || url.password != nil { return "url must not carry credentials" }
        if url.fragment != nil { return "url must not carry a fragment" }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        let addresses: [IPAddress]
        if let literal = IPAddress(bare) {
            addresses = [literal]
        } else {
            addresses = IPAddress.resolve(bare)
            if addresses.isEmpty { return "the host \(bare) does not resolve" }
        }
        for address in addresses {
            if let range = refusal(address) {
                return "the host \(bare) resolves to \(address), a \(range) address (allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true)"
            }
        }
        return nil
    }
}

/// An IPv4 or IPv6 address as its bytes (4 or 16).
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// Parses a numeric address (`192.0.2.1`, `2001:db8::1`, `::ffff:127.0.0.1`); nil for a name.
    public init?(_ text: String) {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = withUnsafeBytes(of: &v6) { Array($0) }
            return
        }
        return nil
    }

    public var description: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        _ = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &buffer, socklen_t(buffer.count)) }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The kind of non-public range the address is in (loopback, private, link-local…), or nil for
    /// a public address. An IPv6 address that carries an IPv4 one (mapped, NAT64, compatible) is
    /// judged by that IPv4 address.
    public var nonPublicRange: String? {
        if bytes.count == 4 { return Self.ipv4Range(bytes) }
        let prefix96 = Array(bytes[0..<12])
        if prefix96 == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF] || prefix96 == [0, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0] {
            return Self.ipv4Range(Array(bytes[12..<16]))
        }
        if prefix96.allSatisfy({ $0 == 0 }) {
            if bytes[12..<15].allSatisfy({ $0 == 0 }) && bytes[15] <= 1 { return bytes[15] == 1 ? "loopback" : "unspecified" }
            return Self.ipv4Range(Array(bytes[12..<16]))
        }
        switch (bytes[0], bytes[1]) {
        case (0xFC...0xFD, _): return "private (unique local)"
        case (0xFE, 0x80...0xBF): return "link-local"
        case (0xFE, 0xC0...0xFF): return "site-local"
        case (0xFF, _): return "multicast"
        default: return nil
        }
    }

    static func ipv4Range(_ b: [UInt8]) -> String? {
        switch (b[0], b[1]) {
        case (0, _): return "unspecified"
        case (10, _), (172, 16...31), (192, 168): return "private"
        case (100, 64...127): return "shared (carrier-grade NAT)"
        case (127, _): return "loopback"
        case (169, 254): return b[2] == 169 && b[3] == 254 ? "metadata (link-local)" : "link-local"
        case (198, 18...19): return "benchmarking"
        case (192, 0) where b[2] == 0: return "IETF protocol assignments"
        case (224...239, _): return "multicast"
        case (240...255, _): return "reserved"
        default: return nil
        }
    }

    /// Every address `name` resolves to (empty when it does not).
    public static func resolve(_ name: String) -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(name, nil, &hints, &list) == 0 else { return [] }
        defer { freeaddrinfo(list) }
        var found: [IPAddress] = []
        var cursor = list
        while let entry = cursor {
            if let address = entry.pointee.ai_addr.flatMap({ IPAddress(socketAddress: UnsafeRawPointer($0)) }),
                !found.contains(address)
            {
                found.append(address)
            }
            cursor = entry.pointee.ai_next
        }
        return found
    }

    /// The address of a `sockaddr_in` or `sockaddr_in6`; nil for another family.
    public init?(socketAddress: UnsafeRawPointer) {
        switch Int32(socketAddress.load(as: sockaddr.self).sa_family) {
        case AF_INET:
            var address = socketAddress.load(as: sockaddr_in.self).sin_addr
            bytes = withUnsafeBytes(of: &address) { Array($0) }
        case AF_INET6:
            var address = socketAddress.load(as: sockaddr_in6.self).sin6_addr
            bytes = withUnsafeBytes(of: &address) { Array($0) }
        default: return nil
        }
    }
}
