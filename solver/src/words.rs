//! How an error quotes what a user wrote and says what was expected: values cut to a few
//! dozen characters, serde's Rust wording ("expected u8", "expected struct Policy") in a
//! user's. Every reader of a user's file or an API object words its errors with these.

/// Longest value an error message quotes: longer values are cut with `...`.
pub const MAX_QUOTED_VALUE_CHARS: usize = 80;

/// `value` as a message quotes it: at most [`MAX_QUOTED_VALUE_CHARS`] characters.
pub fn quote(value: &str) -> String {
    if value.chars().count() <= MAX_QUOTED_VALUE_CHARS {
        return value.to_string();
    }
    let cut: String = value.chars().take(MAX_QUOTED_VALUE_CHARS).collect();
    format!("{cut}... ({} bytes)", value.len())
}

/// `value` as a message quotes a string: [`quote`]d, in double quotes with Rust's escapes.
pub fn quoted(value: &str) -> String {
    format!("{:?}", quote(value))
}

/// A map key as a field path writes it (`spec.gpus.x`): bare when it is a plain name,
/// [`quoted`] otherwise (`mig-devices."1g.10gb x"`), so that the user's key never reads as
/// part of the path.
pub fn path_key(key: &str) -> String {
    let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if plain && key.len() <= MAX_QUOTED_VALUE_CHARS {
        key.to_string()
    } else {
        quoted(key)
    }
}

/// `text` cut to at most `max_bytes` at a character boundary, ending in `...` when cut: how a
/// message longer than its field allows (a condition's 32 KiB, an event's 1 KiB) is written.
pub fn cut(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let mut end = max_bytes.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// serde's wording ("invalid value: integer `256`, expected u8") in a user's: the position
/// suffix dropped (the caller names the field or line instead), Rust type names as ranges
/// and shapes, the value found quoted and cut.
pub fn serde_in_words(message: &str) -> String {
    let message = message.split(" at line ").next().unwrap_or(message);
    for kind in ["invalid value: ", "invalid type: "] {
        if let Some(rest) = message.strip_prefix(kind) {
            if let Some((found, ty)) = rest.rsplit_once(", expected ") {
                let found = quote(&found.replace('`', ""));
                return format!("expected {}, found {found}", expected(ty));
            }
        }
    }
    quote_long_tail(message)
}

/// A Rust type serde names as what a user writes there.
fn expected(ty: &str) -> String {
    let text = match ty {
        "u8" => "a whole number from 0 to 255".into(),
        "u16" => "a whole number from 0 to 65535".into(),
        "u32" => format!("a whole number from 0 to {}", u32::MAX),
        "u64" | "usize" => format!("a whole number from 0 to {}", u64::MAX),
        "i32" => format!("a whole number from {} to {}", i32::MIN, i32::MAX),
        "i64" | "isize" => format!("a whole number from {} to {}", i64::MIN, i64::MAX),
        "f32" | "f64" => "a number".into(),
        "a sequence" => "a list".into(),
        "a map" => "an object (key: value)".into(),
        "a boolean" | "bool" => "true or false".into(),
        "a string" | "a borrowed string" | "char" => "a string".into(),
        _ if ty.starts_with("struct ") || ty.starts_with("tuple struct ") => "an object (key: value)".into(),
        _ if ty.starts_with("enum ") => "one of the values the field documents".into(),
        other => quote(other),
    };
    text
}

/// serde's other messages ("unknown field `x`, expected one of ...") quote what they found
/// in backquotes; a long one is cut like any value.
fn quote_long_tail(message: &str) -> String {
    if message.chars().count() <= 4 * MAX_QUOTED_VALUE_CHARS {
        return message.to_string();
    }
    cut(message, 4 * MAX_QUOTED_VALUE_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_and_say_how_long_they_were() {
        assert_eq!(quote("short"), "short");
        let long = "x".repeat(5_000_000);
        let quoted = quote(&long);
        assert!(quoted.len() < 120, "{quoted}");
        assert!(quoted.ends_with("... (5000000 bytes)"), "{quoted}");
        assert_eq!(quote(&"é".repeat(100)).chars().filter(|c| *c == 'é').count(), MAX_QUOTED_VALUE_CHARS);
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let cut_text = cut(&"é".repeat(600), 1024);
        assert!(cut_text.len() <= 1024 && cut_text.ends_with("..."));
        assert_eq!(cut("short", 1024), "short");
    }

    #[test]
    fn rust_type_names_read_as_what_to_write() {
        assert_eq!(
            serde_in_words("invalid type: null, expected struct Policy at line 1 column 1"),
            "expected an object (key: value), found null"
        );
        assert_eq!(
            serde_in_words("invalid value: integer `256`, expected u8"),
            "expected a whole number from 0 to 255, found integer 256"
        );
        assert_eq!(
            serde_in_words("invalid type: string \"x\", expected enum Mode"),
            "expected one of the values the field documents, found string \"x\""
        );
    }
}
