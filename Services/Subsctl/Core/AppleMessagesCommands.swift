import AppStore
import Catalogue
import Domain
import Foundation
import Storage

/// What the `subsctl apple messages` commands share (Apple's Retention Messaging API): the
/// client of the `APPLE_IAP_*` settings for `--env`, and for every change at Apple an audit row of
/// what was asked and what Apple answered, accepted or refused.
enum RetentionMessaging {
    /// The options every command takes.
    struct Common {
        var environment: String?
        var asJSON: Bool
        var operatorName: String
        var reason: String?

        init(_ arguments: inout ParsedArguments) {
            environment = arguments.option("env")
            asJSON = arguments.flag("json")
            operatorName = arguments.operatorName()
            reason = arguments.option("reason")
        }
    }

    /// The audit row's `after`: whether Apple accepted the change, else its refusal.
    struct Answered: Encodable, Sendable {
        var accepted: Bool
        var error: String?
    }

    /// The `--json` answer of a change.
    struct Changed: Encodable {
        /// Filled from the client's environment when the call is made.
        var environment = ""
        var action: String
        var messageIdentifier: String?
        var imageIdentifier: String?
        var productId: String?
        var locale: String?
    }

    /// A UUID option, lowercase as Apple's identifiers are written everywhere here.
    static func identifier(_ text: String?, option: String) -> Result<UUID?, Problem> {
        guard let text else { return .success(nil) }
        guard let parsed = UUID(uuidString: text) else { return .failure(Problem(message: "--\(option) must be a UUID")) }
        return .success(parsed)
    }

    /// Why the options cannot make a request, for the usage error.
    struct Problem: Error {
        let message: String
    }

    /// Makes one change at Apple and audits it (`action`, `asked` and Apple's answer), then prints
    /// `changed`. Without `--reason` nothing is sent: every change says why, for the audit trail.
    static func change(
        _ action: String, asked: some Encodable & Sendable, changed: Changed, common: Common, usage: String,
        call: (AppStoreServerAPIClient) async throws(AppStoreAPIError) -> Void
    ) async -> Int32 {
        guard let reason = common.reason, !reason.trimmingCharacters(in: .whitespaces).isEmpty else {
            Subsctl.printError("--reason is required: say why, for the audit trail\nusage: subsctl \(usage)")
            return ExitStatus.usage
        }
        let client: AppStoreServerAPIClient
        switch AppleAPIAccess.client(environment: common.environment) {
        case .success(let made): client = made
        case .failure(let exit): return exit.status
        }
        var changed = changed
        changed.environment = client.configuration.environment.rawValue
        return await Subsctl.withDatabase { pool in
            var answered = Answered(accepted: true)
            var status = ExitStatus.success
            do throws(AppStoreAPIError) { try await call(client) } catch {
                answered = Answered(accepted: false, error: error.description)
                status = AppleAPIAccess.failed(error)
            }
            try await AuditLog(pool: pool).record(
                operator: common.operatorName, action: action, reason: reason,
                before: AuditedRequest(environment: changed.environment, request: asked), after: answered)
            if answered.accepted {
                try Subsctl.printResult(changed, asJSON: common.asJSON) {
                    ["environment=\(changed.environment)", "action=\(changed.action)"].joined(separator: " ")
                        + (changed.messageIdentifier.map { " messageIdentifier=\($0)" } ?? "")
                        + (changed.imageIdentifier.map { " imageIdentifier=\($0)" } ?? "")
                        + (changed.productId.map { " productId=\($0)" } ?? "") + (changed.locale.map { " locale=\($0)" } ?? "")
                }
            }
            return status
        }
    }

    /// A read at Apple for a command taking only `--env` and `--json`: `fetch`'s items, printed
    /// as `{"items": …}` or a `line` each.
    static func list<Item: Encodable>(
        _ arguments: ParsedArguments, usage: String, fetch: (AppStoreServerAPIClient) async throws(AppStoreAPIError) -> [Item],
        line: (Item) -> String
    ) async -> Int32 {
        var arguments = arguments
        let environment = arguments.option("env")
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch {
            Subsctl.printError("\(error.description)\nusage: subsctl \(usage)")
            return ExitStatus.usage
        }
        guard arguments.positionals.isEmpty else {
            Subsctl.printError("unexpected argument \(arguments.positionals[0])\nusage: subsctl \(usage)")
            return ExitStatus.usage
        }
        let client: AppStoreServerAPIClient
        switch AppleAPIAccess.client(environment: environment) {
        case .success(let made): client = made
        case .failure(let exit): return exit.status
        }
        let items: [Item]
        do throws(AppStoreAPIError) { items = try await fetch(client) } catch { return AppleAPIAccess.failed(error) }
        do { try Subsctl.printItems(items, asJSON: asJSON, line: line) } catch {
            Subsctl.printError("\(error)")
            return ExitStatus.refused
        }
        return ExitStatus.success
    }

    /// What an audit row keeps of a request: the environment it went to, and Apple's request.
    struct AuditedRequest<Request: Encodable & Sendable>: Encodable, Sendable {
        var environment: String
        var request: Request
    }
}

/// `subsctl apple messages upload`: Upload Message, the text Apple reviews before it can be shown.
enum AppleMessagesUploadCommand: SubsctlCommand {
    static let path = ["apple", "messages", "upload"]
    static let usage =
        "apple messages upload (--header TEXT --body TEXT [--image-id UUID --alt-text TEXT] [--header-position ABOVE_BODY|ABOVE_IMAGE]"
        + " | --file UploadMessageRequestBody.json) [--message-id UUID] --reason TEXT [--env Production|Sandbox] [--operator NAME] [--json]"
    static let summary =
        "Upload a retention message to Apple (header ≤ 66, body ≤ 144 characters; an uploaded image with alt text ≤ 150);"
        + " a new UUID unless --message-id; Apple reviews it (see apple messages list); audited."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let common = RetentionMessaging.Common(&arguments)
        let header = arguments.option("header")
        let body = arguments.option("body")
        let imageText = arguments.option("image-id")
        let altText = arguments.option("alt-text")
        let positionText = arguments.option("header-position")
        let file = arguments.option("file")
        let messageText = arguments.option("message-id")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        let message: UploadMessageRequestBody
        switch request(header: header, body: body, image: imageText, altText: altText, position: positionText, file: file) {
        case .success(let made): message = made
        case .failure(let problem): return usageError(problem.message)
        }
        let identifier: UUID
        switch RetentionMessaging.identifier(messageText, option: "message-id") {
        case .success(let given): identifier = given ?? UUID()
        case .failure(let problem): return usageError(problem.message)
        }
        let id = identifier.uuidString.lowercased()
        return await RetentionMessaging.change(
            "RETENTION_MESSAGE_UPLOADED", asked: Asked(messageIdentifier: id, message: message),
            changed: .init(action: "uploaded", messageIdentifier: id), common: common, usage: usage
        ) { client throws(AppStoreAPIError) in try await client.uploadMessage(messageIdentifier: identifier, message) }
    }

    struct Asked: Encodable, Sendable {
        var messageIdentifier: String
        var message: UploadMessageRequestBody
    }

    typealias Problem = RetentionMessaging.Problem

    /// The message from the options or Apple's request body in a file, checked against Apple's
    /// documented limits so a refusal is explained before anything is sent.
    static func request(header: String?, body: String?, image: String?, altText: String?, position: String?, file: String?)
        -> Result<UploadMessageRequestBody, Problem>
    {
        var message: UploadMessageRequestBody
        if let file {
            guard header == nil, body == nil, image == nil, altText == nil, position == nil else {
                return .failure(
                    Problem(message: "--file gives the whole message: no --header, --body, --image-id, --alt-text or --header-position with it"))
            }
            guard let data = FileManager.default.contents(atPath: file) else { return .failure(Problem(message: "cannot read \(file)")) }
            do { message = try AppStoreJSON.decoder().decode(UploadMessageRequestBody.self, from: data) } catch {
                return .failure(
                    Problem(message: "\(file) is not Apple's UploadMessageRequestBody (header, body, image, headerPosition, bulletPoints)"))
            }
        } else {
            guard let header, let body else { return .failure(Problem(message: "--header and --body are required (or --file)")) }
            var uploadImage: UploadMessageImage?
            switch (image, altText) {
            case (nil, nil): uploadImage = nil
            case (let image?, let altText?):
                guard let imageID = UUID(uuidString: image) else { return .failure(Problem(message: "--image-id must be a UUID")) }
                uploadImage = UploadMessageImage(imageIdentifier: imageID, altText: altText)
            default: return .failure(Problem(message: "--image-id and --alt-text go together"))
            }
            var headerPosition: RetentionHeaderPosition?
            if let position {
                guard let parsed = RetentionHeaderPosition(rawValue: position) else {
                    return .failure(Problem(message: "--header-position must be ABOVE_BODY or ABOVE_IMAGE"))
                }
                headerPosition = parsed
            }
            message = UploadMessageRequestBody(header: header, body: body, image: uploadImage, headerPosition: headerPosition)
        }
        typealias Limits = UploadMessageRequestBody
        let bullets = message.bulletPoints ?? []
        let problems =
            [
                message.header.isEmpty || message.body.isEmpty ? "the header and the body must not be empty" : nil,
                message.header.count > Limits.maxHeaderLength
                    ? "the header is \(message.header.count) characters; Apple takes at most \(Limits.maxHeaderLength)" : nil,
                message.body.count > Limits.maxBodyLength
                    ? "the body is \(message.body.count) characters; Apple takes at most \(Limits.maxBodyLength)" : nil,
                ((message.image.map { [$0.altText] } ?? []) + bullets.map(\.altText)).contains { $0.count > Limits.maxAltTextLength }
                    ? "an alt text is longer than Apple's \(Limits.maxAltTextLength) characters" : nil,
                bullets.count > Limits.maxBulletPoints ? "\(bullets.count) bullet points; Apple takes at most \(Limits.maxBulletPoints)" : nil,
                bullets.contains { $0.text.count > Limits.maxBulletPointTextLength }
                    ? "a bullet point is longer than Apple's \(Limits.maxBulletPointTextLength) characters" : nil,
                message.headerPosition == .aboveImage && message.image == nil ? "ABOVE_IMAGE needs an image (--image-id)" : nil,
            ].compactMap { $0 }
        guard problems.isEmpty else { return .failure(Problem(message: problems.joined(separator: "\n"))) }
        return .success(message)
    }
}

/// `subsctl apple messages list`: Get Message List, every uploaded message with Apple's review.
enum AppleMessagesListCommand: SubsctlCommand {
    static let path = ["apple", "messages", "list"]
    static let usage = "apple messages list [--env Production|Sandbox] [--json]"
    static let summary = "List the retention messages uploaded to Apple with their state (PENDING, APPROVED, REJECTED)."

    struct Item: Encodable {
        var messageIdentifier: String
        var messageState: String
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        await RetentionMessaging.list(
            arguments, usage: usage,
            fetch: { client throws(AppStoreAPIError) in
                (try await client.getMessageList().messageIdentifiers ?? []).map {
                    Item(messageIdentifier: $0.messageIdentifier ?? "-", messageState: $0.messageState?.rawValue ?? "-")
                }
            },
            line: { "messageIdentifier=\($0.messageIdentifier) state=\($0.messageState)" })
    }
}

/// `subsctl apple messages delete`: Delete Message (its identifier no longer exists at Apple).
enum AppleMessagesDeleteCommand: SubsctlCommand {
    static let path = ["apple", "messages", "delete"]
    static let usage = "apple messages delete --message-id UUID --reason TEXT [--env Production|Sandbox] [--operator NAME] [--json]"
    static let summary = "Delete a retention message at Apple (a catalogue rule naming it then gets Apple's default); audited."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let common = RetentionMessaging.Common(&arguments)
        let messageText = arguments.option("message-id")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard case .success(let given) = RetentionMessaging.identifier(messageText, option: "message-id"), let identifier = given else {
            return usageError("--message-id must be the message's UUID")
        }
        let id = identifier.uuidString.lowercased()
        return await RetentionMessaging.change(
            "RETENTION_MESSAGE_DELETED", asked: ["messageIdentifier": id] as [String: String],
            changed: .init(action: "deleted", messageIdentifier: id), common: common, usage: usage
        ) { client throws(AppStoreAPIError) in try await client.deleteMessage(messageIdentifier: identifier) }
    }
}

/// `subsctl apple messages image upload`: Upload Image, a PNG read from a file.
enum AppleMessagesImageUploadCommand: SubsctlCommand {
    static let path = ["apple", "messages", "image", "upload"]
    static let usage =
        "apple messages image upload --file IMAGE.png [--size FULL_SIZE|BULLET_POINT] [--image-id UUID] --reason TEXT"
        + " [--env Production|Sandbox] [--operator NAME] [--json]"
    static let summary =
        "Upload a PNG without transparency for retention messages (FULL_SIZE: 3840 wide, 160 to 2160 high; BULLET_POINT: an icon);"
        + " a new UUID unless --image-id; audited."

    static let pngSignature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    struct Asked: Encodable, Sendable {
        var imageIdentifier: String
        var imageSize: String
        var file: String
        var bytes: Int
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let common = RetentionMessaging.Common(&arguments)
        let file = arguments.option("file")
        let sizeText = arguments.option("size")
        let imageText = arguments.option("image-id")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let file else { return usageError("--file is required: the PNG to upload") }
        let size = RetentionImageSize(rawValue: sizeText ?? RetentionImageSize.fullSize.rawValue)
        guard let size else { return usageError("--size must be FULL_SIZE or BULLET_POINT") }
        let identifier: UUID
        switch RetentionMessaging.identifier(imageText, option: "image-id") {
        case .success(let given): identifier = given ?? UUID()
        case .failure(let problem): return usageError(problem.message)
        }
        guard let png = FileManager.default.contents(atPath: file) else {
            Subsctl.printError("cannot read \(file)")
            return ExitStatus.noInput
        }
        // Apple takes PNG only: a JPEG or a misnamed file is refused here, before it costs a call.
        guard png.starts(with: pngSignature) else { return usageError("\(file) is not a PNG file") }
        let id = identifier.uuidString.lowercased()
        return await RetentionMessaging.change(
            "RETENTION_IMAGE_UPLOADED",
            asked: Asked(imageIdentifier: id, imageSize: size.rawValue, file: URL(fileURLWithPath: file).lastPathComponent, bytes: png.count),
            changed: .init(action: "uploaded", imageIdentifier: id), common: common, usage: usage
        ) { client throws(AppStoreAPIError) in try await client.uploadImage(imageIdentifier: identifier, png: png, imageSize: size) }
    }
}

/// `subsctl apple messages image list`: Get Image List, every uploaded image with Apple's review.
enum AppleMessagesImageListCommand: SubsctlCommand {
    static let path = ["apple", "messages", "image", "list"]
    static let usage = "apple messages image list [--env Production|Sandbox] [--json]"
    static let summary = "List the retention images uploaded to Apple with their state and size."

    struct Item: Encodable {
        var imageIdentifier: String
        var imageState: String
        var imageSize: String
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        await RetentionMessaging.list(
            arguments, usage: usage,
            fetch: { client throws(AppStoreAPIError) in
                (try await client.getImageList().imageIdentifiers ?? []).map {
                    Item(imageIdentifier: $0.imageIdentifier ?? "-", imageState: $0.imageState?.rawValue ?? "-", imageSize: $0.imageSize ?? "-")
                }
            },
            line: { "imageIdentifier=\($0.imageIdentifier) state=\($0.imageState) size=\($0.imageSize)" })
    }
}

/// The product and locale options of the default-message commands.
enum DefaultMessageTarget {
    static func read(_ arguments: inout ParsedArguments) -> (product: String?, locale: String?) {
        (arguments.option("product"), arguments.option("locale"))
    }

    /// Both given and plain path segments, else the usage problem.
    static func check(product: String?, locale: String?) -> String? {
        guard let product, !product.isEmpty else { return "--product is required" }
        guard let locale, locale.wholeMatch(of: /[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*/) != nil else {
            return "--locale is required: Apple's locale (en-US)"
        }
        guard product.wholeMatch(of: /[A-Za-z0-9._-]{1,128}/) != nil else { return "--product must be a product identifier" }
        return nil
    }
}

/// `subsctl apple messages default set`: Configure Default Message of a product and locale.
enum AppleMessagesDefaultSetCommand: SubsctlCommand {
    static let path = ["apple", "messages", "default", "set"]
    static let usage =
        "apple messages default set --product ID --locale LOCALE --message-id UUID --reason TEXT [--env Production|Sandbox] [--operator NAME] [--json]"
    static let summary =
        "Make an approved message Apple's default for a product and locale (shown when our endpoint gives no answer); audited."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let common = RetentionMessaging.Common(&arguments)
        let (product, locale) = DefaultMessageTarget.read(&arguments)
        let messageText = arguments.option("message-id")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        if let problem = DefaultMessageTarget.check(product: product, locale: locale) { return usageError(problem) }
        guard let product, let locale else { return usageError("--product and --locale are required") }
        guard case .success(let given) = RetentionMessaging.identifier(messageText, option: "message-id"), let identifier = given else {
            return usageError("--message-id must be the message's UUID")
        }
        let id = identifier.uuidString.lowercased()
        return await RetentionMessaging.change(
            "RETENTION_DEFAULT_MESSAGE_SET", asked: ["productId": product, "locale": locale, "messageIdentifier": id] as [String: String],
            changed: .init(action: "default set", messageIdentifier: id, productId: product, locale: locale),
            common: common, usage: usage
        ) { client throws(AppStoreAPIError) in
            try await client.configureDefaultMessage(productId: product, locale: locale, messageIdentifier: identifier)
        }
    }
}

/// `subsctl apple messages default show`: Get Default Message of a product and locale.
enum AppleMessagesDefaultShowCommand: SubsctlCommand {
    static let path = ["apple", "messages", "default", "show"]
    static let usage = "apple messages default show --product ID --locale LOCALE [--env Production|Sandbox] [--json]"
    static let summary = "Print the default retention message Apple shows for a product and locale (exit 1 when none is set)."

    struct Output: Encodable {
        var productId: String
        var locale: String
        var messageIdentifier: String?
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let environment = arguments.option("env")
        let asJSON = arguments.flag("json")
        let (product, locale) = DefaultMessageTarget.read(&arguments)
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        if let problem = DefaultMessageTarget.check(product: product, locale: locale) { return usageError(problem) }
        guard let product, let locale else { return usageError("--product and --locale are required") }
        let client: AppStoreServerAPIClient
        switch AppleAPIAccess.client(environment: environment) {
        case .success(let made): client = made
        case .failure(let exit): return exit.status
        }
        var output = Output(productId: product, locale: locale)
        do throws(AppStoreAPIError) {
            output.messageIdentifier = try await client.getDefaultMessage(productId: product, locale: locale).messageIdentifier
        } catch  where error.apiError == .defaultMessageNotFound {
            output.messageIdentifier = nil
        } catch { return AppleAPIAccess.failed(error) }
        do {
            try Subsctl.printResult(output, asJSON: asJSON) {
                "productId=\(product) locale=\(locale) messageIdentifier=\(output.messageIdentifier ?? "- (none configured)")"
            }
        } catch {
            Subsctl.printError("\(error)")
            return ExitStatus.refused
        }
        return output.messageIdentifier == nil ? ExitStatus.refused : ExitStatus.success
    }
}

/// `subsctl apple messages default delete`: Delete Default Message of a product and locale.
enum AppleMessagesDefaultDeleteCommand: SubsctlCommand {
    static let path = ["apple", "messages", "default", "delete"]
    static let usage =
        "apple messages default delete --product ID --locale LOCALE --reason TEXT [--env Production|Sandbox] [--operator NAME] [--json]"
    static let summary = "Remove the default retention message of a product and locale at Apple; audited."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let common = RetentionMessaging.Common(&arguments)
        let (product, locale) = DefaultMessageTarget.read(&arguments)
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        if let problem = DefaultMessageTarget.check(product: product, locale: locale) { return usageError(problem) }
        guard let product, let locale else { return usageError("--product and --locale are required") }
        return await RetentionMessaging.change(
            "RETENTION_DEFAULT_MESSAGE_DELETED", asked: ["productId": product, "locale": locale] as [String: String],
            changed: .init(action: "default deleted", productId: product, locale: locale), common: common,
            usage: usage
        ) { client throws(AppStoreAPIError) in try await client.deleteDefaultMessage(productId: product, locale: locale) }
    }
}

/// `subsctl apple messages check`: the operator's check before `RETENTION_MESSAGING_ENABLED`:
/// every message the catalogue's `retentionMessages` name, against Apple's message list.
enum AppleMessagesCheckCommand: SubsctlCommand {
    static let path = ["apple", "messages", "check"]
    static let usage = "apple messages check [--catalogue FILE] [--env Production|Sandbox] [--json]"
    static let summary =
        "List the catalogue's retention messages (DATABASE_URL's, or a catalogue FILE's) that Apple does not have or has not"
        + " approved; exit 1 when any, 0 when every one can be shown."

    struct Output: Encodable {
        var environment: String
        var ready: Bool
        var messages: [RetentionMessageReadiness]
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let environment = arguments.option("env")
        let asJSON = arguments.flag("json")
        let file = arguments.option("catalogue")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        var products: [CatalogueProduct]?
        if let file {
            do { products = try CatalogueFile.load(path: file).products } catch {
                Subsctl.printError("\(file) refused:\n\(error.description)")
                return ExitStatus.refused
            }
        }
        let client: AppStoreServerAPIClient
        switch AppleAPIAccess.client(environment: environment) {
        case .success(let made): client = made
        case .failure(let exit): return exit.status
        }
        if let products { return await check(products, client: client, asJSON: asJSON) }
        return await Subsctl.withDatabase { pool in
            let products = try await CatalogueStore(pool: pool).products(appKey: client.configuration.bundleId)
            return await check(products, client: client, asJSON: asJSON)
        }
    }

    static func check(_ products: [CatalogueProduct], client: AppStoreServerAPIClient, asJSON: Bool) async -> Int32 {
        let states: [String: String]
        do throws(AppStoreAPIError) {
            let listed = try await client.getMessageList().messageIdentifiers ?? []
            states = Dictionary(
                listed.compactMap { item in item.messageIdentifier.map { ($0, item.messageState?.rawValue ?? "-") } },
                uniquingKeysWith: { first, _ in first })
        } catch { return AppleAPIAccess.failed(error) }
        let readiness = RetentionRules.readiness(of: products, states: states)
        let unready = readiness.filter { !$0.isReady }
        let output = Output(environment: client.configuration.environment.rawValue, ready: unready.isEmpty, messages: readiness)
        do {
            try Subsctl.printResult(output, asJSON: asJSON) {
                (unready.map {
                    "productId=\($0.productId) messageIdentifier=\($0.messageIdentifier) state=\($0.messageState ?? "MISSING (not uploaded)")"
                } + ["checked=\(readiness.count) notReady=\(unready.count) environment=\(output.environment)"]).joined(separator: "\n")
            }
        } catch {
            Subsctl.printError("\(error)")
            return ExitStatus.refused
        }
        return unready.isEmpty ? ExitStatus.success : ExitStatus.refused
    }
}
