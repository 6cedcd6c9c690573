//! What a name, a key, an owner and an idempotency key may contain, written once. The
//! OpenAPI document states these patterns (its attributes name them by a placeholder,
//! `{name}`, `{text}`, `{word}`, `{idempotency_key}`, `{addr}`, replaced by
//! [`pattern`]); the state machine's checks enforce the same sets (a test of the server
//! compares [`HIDDEN`] with them, character by character).

/// Characters no name, key or owner may contain, as inclusive ranges of code points: the
/// C0 and C1 controls, then bidirectional controls and zero-width characters (text that
/// shows other than it is stored).
pub const HIDDEN: &[(u32, u32)] = &[
    (0x0000, 0x001F),
    (0x007F, 0x009F),
    (0x061C, 0x061C),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2069),
    (0xFEFF, 0xFEFF),
];

/// Whether `c` is in [`HIDDEN`].
pub fn is_hidden(c: char) -> bool {
    let c = c as u32;
    HIDDEN.iter().any(|&(low, high)| (low..=high).contains(&c))
}

/// The character class of everything but [`HIDDEN`], in ECMA-262 syntax: `[^\u0000-…]`.
fn visible_class() -> String {
    let mut class = String::from("[^");
    for &(low, high) in HIDDEN {
        class.push_str(&format!("\\u{low:04X}"));
        if high != low {
            class.push_str(&format!("-\\u{high:04X}"));
        }
    }
    class.push(']');
    class
}

/// The pattern (ECMA-262, as OpenAPI uses) that `placeholder` stands for, or `None` for an
/// unknown placeholder:
/// - `{name}`: a lock, semaphore or election name, a key or a prefix: not empty, no
///   hidden character, no `.` or `..` segment;
/// - `{text}`: an owner or a value: possibly empty, no hidden character;
/// - `{word}`: as `{text}`, not empty;
/// - `{idempotency_key}`: visible ASCII, not empty;
/// - `{addr}`: an IPv4 address and a port 1..=65535.
pub fn pattern(placeholder: &str) -> Option<String> {
    Some(match placeholder {
        "{name}" => format!(r"^(?!(.*/)?\.\.?(/|$)){}+$", visible_class()),
        "{text}" => format!("^{}*$", visible_class()),
        "{word}" => format!("^{}+$", visible_class()),
        "{idempotency_key}" => r"^[!-~]+$".to_owned(),
        "{addr}" => {
            let octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
            let port = "([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])";
            format!(r"^({octet}\.){{3}}{octet}:{port}$")
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patterns_are_the_ones_the_document_always_stated() {
        let class = r"[^\u0000-\u001F\u007F-\u009F\u061C\u180E\u200B-\u200F\u202A-\u202E\u2060-\u2069\uFEFF]";
        assert_eq!(
            pattern("{name}").as_deref(),
            Some(format!(r"^(?!(.*/)?\.\.?(/|$)){class}+$").as_str())
        );
        assert_eq!(
            pattern("{text}").as_deref(),
            Some(format!("^{class}*$").as_str())
        );
        assert_eq!(
            pattern("{addr}").as_deref(),
            Some(
                r"^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]):([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$"
            )
        );
        assert_eq!(pattern("{other}"), None);
    }

    #[test]
    fn hidden_holds_controls_and_invisible_marks_only() {
        assert!(is_hidden('\n') && is_hidden('\u{85}') && is_hidden('\u{200D}'));
        assert!(!is_hidden('a') && !is_hidden('/') && !is_hidden('é') && !is_hidden(' '));
    }
}
