import Foundation

/// A numeric IPv4 or IPv6 listen address in the sockaddr form MHD binds to.
struct SocketAddress {
    private enum Storage {
        case v4(sockaddr_in)
        case v6(sockaddr_in6)
    }
    private var storage: Storage

    init?(host: String, port: UInt16) {
        let host = host == "localhost" ? "127.0.0.1" : host
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            storage = .v4(v4)
            return
        }
        var v6 = sockaddr_in6()
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard inet_pton(AF_INET6, bare, &v6.sin6_addr) == 1 else { return nil }
        v6.sin6_family = sa_family_t(AF_INET6)
        v6.sin6_port = port.bigEndian
        storage = .v6(v6)
    }

    var isIPv6: Bool { if case .v6 = storage { true } else { false } }

    mutating func withSockaddr<R>(_ body: (UnsafeMutableRawPointer) -> R) -> R {
        switch storage {
        case .v4(var address): withUnsafeMutablePointer(to: &address) { body($0) }
        case .v6(var address): withUnsafeMutablePointer(to: &address) { body($0) }
        }
    }

    /// The numeric host of a peer address (`""` for families other than IPv4/IPv6).
    static func describe(_ address: UnsafeMutablePointer<sockaddr>) -> String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = Int32(address.pointee.sa_family)
        let written: UnsafePointer<CChar>? =
            switch family {
            case AF_INET:
                address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    inet_ntop(AF_INET, &$0.pointee.sin_addr, &text, socklen_t(text.count))
                }
            case AF_INET6:
                address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    inet_ntop(AF_INET6, &$0.pointee.sin6_addr, &text, socklen_t(text.count))
                }
            default: nil
            }
        return written == nil ? "" : String(nulTerminated: text)
    }
}

extension String {
    /// The text of a C buffer up to its first NUL.
    init(nulTerminated buffer: [CChar]) {
        self.init(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
