import CMicroHTTPD
import CShims
import Foundation

// The libmicrohttpd callbacks of `ServerCore`: plain C function pointers without captures, so
// all state arrives through the `cls` pointers. They only translate and forward.

/// Header fields and query arguments gathered by `collectField`.
struct HeadFields {
    var headers: [String: String] = [:]
    var query: [String: String] = [:]
    /// A query argument named more than once (`limit=1&limit=100`): refused, not guessed at.
    var repeatedQuery = false
    /// Bytes of the header names and values, for the head limit.
    var headBytes = 0
}

// MARK: C callbacks (no captures: state arrives through the `cls` pointers)

let accessHandler: MHD_AccessHandlerCallback = {
    cls, connection, url, method, version, uploadData, uploadSize, contextPointer in
    guard let cls, let connection, let uploadSize, let contextPointer else { return .NO }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    if let existing = contextPointer.pointee {
        let context = Unmanaged<ConnectionRequest>.fromOpaque(existing).takeUnretainedValue()
        return core.proceed(context, uploadData: uploadData, uploadSize: uploadSize)
    }
    let context = core.begin(
        connection, url: url.map { String(cString: $0) } ?? "/",
        method: method.map { String(cString: $0) } ?? "", version: version.map { String(cString: $0) } ?? "")
    contextPointer.pointee = Unmanaged.passRetained(context).toOpaque()
    return context.early == nil ? .YES : core.respondEarly(context)
}

let requestCompleted: MHD_RequestCompletedCallback = { cls, _, contextPointer, _ in
    guard let cls, let contextPointer, let pointer = contextPointer.pointee else { return }
    let context = Unmanaged<ConnectionRequest>.fromOpaque(pointer).takeRetainedValue()
    contextPointer.pointee = nil
    Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().completed(context)
}

let acceptPolicy: MHD_AcceptPolicyCallback = { cls, address, _ in
    guard let cls, let address else { return .NO }
    let peer = SocketAddress.describe(UnsafeMutablePointer(mutating: address))
    return Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().connections.admit(peer) ? .YES : .NO
}

let connectionChanged: MHD_NotifyConnectionCallback = { cls, connection, _, change in
    guard let cls, let connection else { return }
    let table = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().connections
    switch change {
    case .CONNECTION_NOTIFY_STARTED:
        let peer =
            cshims_mhd_get_connection_info(connection, .CONNECTION_INFO_CLIENT_ADDRESS)
            .flatMap { $0.pointee.client_addr }.map(SocketAddress.describe) ?? ""
        let socket = cshims_mhd_get_connection_info(connection, .CONNECTION_INFO_CONNECTION_FD)?.pointee.connect_fd ?? -1
        table.opened(connection, address: peer, socket: socket)
    case .CONNECTION_NOTIFY_CLOSED:
        table.closed(connection)
    default:
        break
    }
}

let daemonLog: MHD_LogCallback = { cls, format, arguments in
    guard let cls, let format, let arguments else { return }
    var buffer = [CChar](repeating: 0, count: 512)
    _ = vsnprintf(&buffer, buffer.count, format, arguments)
    let message = String(nulTerminated: buffer).trimmingCharacters(in: .whitespacesAndNewlines)
    Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().logDaemonMessage(message)
}

let keepEscapes: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<CChar>?) -> Int = {
    _, _, text in text.map { strlen($0) } ?? 0
}

let collectField: MHD_KeyValueIterator = { cls, kind, key, value in
    guard let cls, let key else { return .YES }
    let fields = cls.assumingMemoryBound(to: HeadFields.self)
    let name = String(cString: key)
    let text = value.map { String(cString: $0) } ?? ""
    if kind == .HEADER_KIND {
        fields.pointee.headBytes += name.utf8.count + text.utf8.count + 4
        let lowered = name.lowercased()
        fields.pointee.headers[lowered] = fields.pointee.headers[lowered].map { $0 + ", " + text } ?? text
    } else {
        let decode = { (s: String) in
            let spaced = s.replacingOccurrences(of: "+", with: " ")
            return spaced.removingPercentEncoding ?? spaced
        }
        let decodedName = decode(name)
        if fields.pointee.query[decodedName] == nil {
            fields.pointee.query[decodedName] = decode(text)
        } else {
            fields.pointee.repeatedQuery = true
        }
    }
    return .YES
}
