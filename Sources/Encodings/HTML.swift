/// Text put into HTML or XML: a mail's HTML part, the unsubscribe pages, the release benchmark's
/// report and its SVG charts (`&#39;` is XML's too).
public enum HTML {
    /// `text` with the five characters that could end an element or an attribute escaped.
    public static func escape(_ text: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
