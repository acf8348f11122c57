//! Scalars and keys: plain, single- and double-quoted on one line, literal and folded blocks.

use std::borrow::Cow;

use super::{Line, Reader};

/// What a plain scalar resolves to, as the general parser resolves it (YAML 1.2's core
/// schema); `None` from [`resolve`] for a scalar that may be something else (a float, an
/// octal, a YAML 1.1 boolean such as `yes`), which is left to the general parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plain {
    Null,
    Bool(bool),
    Integer,
    Str,
}

fn resolve(text: &str) -> Option<Plain> {
    match text {
        "~" | "null" | "Null" | "NULL" => return Some(Plain::Null),
        "true" | "True" | "TRUE" => return Some(Plain::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Plain::Bool(false)),
        _ => {}
    }
    let first = text.as_bytes()[0];
    if first.is_ascii_alphabetic() || first >= 0x80 || first == b'_' || first == b'/' {
        const MAYBE_NOT_A_STRING: [&str; 9] = ["yes", "no", "on", "off", "y", "n", "nan", "inf", "infinity"];
        let maybe = text.len() <= 8
            && matches!(first | 0x20, b'y' | b'n' | b'o' | b'i')
            && MAYBE_NOT_A_STRING.iter().any(|w| w.eq_ignore_ascii_case(text));
        return (!maybe).then_some(Plain::Str);
    }
    if !(first.is_ascii_digit() || first == b'-') {
        return None;
    }
    if is_decimal_integer(text) {
        return Some(Plain::Integer);
    }
    // A uid, a version, an address, a quantity: text no number can be.
    (!could_be_a_number(text)).then_some(Plain::Str)
}

/// Whether `text` has the shape of a number in YAML 1.1 or 1.2 (sign; hexadecimal, octal,
/// binary; digits with `_`, `:` and one `.`; an exponent), which the general parser may
/// resolve so. What has another shape is a string.
fn could_be_a_number(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let digits_in = |t: &str, radix: u32| t.chars().all(|c| c.is_digit(radix) || c == '_');
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(t) = unsigned.strip_prefix(prefix) {
            return digits_in(t, radix);
        }
    }
    if unsigned.starts_with('.') {
        // `.inf`, `.nan`, `.5`.
        return true;
    }
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits_in(e, 10)
    });
    exponent_ok
        && mantissa.matches('.').count() <= 1
        && mantissa.chars().all(|c| c.is_ascii_digit() || "_:.".contains(c))
}

/// `0`, or digits without a leading zero, maybe after `-`, that fit an `i64`.
fn is_decimal_integer(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if text == "0" {
        return true;
    }
    !digits.is_empty()
        && digits.len() <= 18
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A mapping entry's key and the text after its `:`; `None` when `content` is not an entry
/// with a plain or one-line quoted string key.
pub(super) fn key(content: &str) -> Option<(Cow<'_, str>, &str)> {
    let (key, after) = match content.as_bytes()[0] {
        b'"' | b'\'' => quoted(content)?,
        _ => {
            let colon = plain_key_end(content)?;
            let key = content[..colon].trim_end_matches(' ');
            if key.is_empty()
                || key.len() > 1024
                || pair_at(key, b' ', b'#').is_some()
                || starts_with_indicator(key)
            {
                return None;
            }
            (resolve(key) == Some(Plain::Str)).then_some((Cow::Borrowed(key), &content[colon..]))?
        }
    };
    let after = after.strip_prefix(':')?;
    (after.is_empty() || after.starts_with(' ')).then_some((key, after))
}

/// Where `first` followed by `second` is in `text` (`: `, ` #`), found by `second`, the rarer
/// of the two in kubectl's YAML.
fn pair_at(text: &str, first: u8, second: u8) -> Option<usize> {
    let bytes = text.as_bytes();
    memchr::memchr_iter(second, bytes).find(|&at| at > 0 && bytes[at - 1] == first).map(|at| at - 1)
}

/// Where the `:` that ends a plain key is: the first followed by a space or the line's end.
fn plain_key_end(content: &str) -> Option<usize> {
    let bytes = content.as_bytes();
    memchr::memchr_iter(b':', bytes).find(|&at| bytes.get(at + 1).is_none_or(|&b| b == b' '))
}

/// Characters that start something other than a plain scalar (or that this reader leaves).
fn starts_with_indicator(text: &str) -> bool {
    matches!(
        text.as_bytes().first(),
        Some(b'-' | b'?' | b':' | b',' | b'[' | b']' | b'{' | b'}' | b'#' | b'&' | b'*' | b'!' | b'|' | b'>')
            | Some(b'\'' | b'"' | b'%' | b'@' | b'`')
    )
}

/// Where a quoted scalar's line left it.
enum Scan<'t> {
    /// Closed, with the text after the closing quote.
    Closed(&'t str),
    /// Still open at the line's end.
    Open,
}

/// A quoted scalar that closes on its line (`text` starts with its quote): its value and the
/// text after it.
fn quoted(text: &str) -> Option<(Cow<'_, str>, &str)> {
    let double = text.starts_with('"');
    let body = &text[1..];
    // Most have nothing to unescape: borrow them.
    let stop = if double { body.find(['"', '\\'])? } else { body.find('\'')? };
    let closes = match body.as_bytes()[stop] {
        b'"' => true,
        b'\'' => body.as_bytes().get(stop + 1) != Some(&b'\''),
        _ => false,
    };
    if closes {
        return Some((Cow::Borrowed(&body[..stop]), &body[stop + 1..]));
    }
    let mut value = String::new();
    match scan_quoted(body, double, &mut value)? {
        Scan::Closed(after) => Some((Cow::Owned(value), after)),
        Scan::Open => None,
    }
}

/// One line of a quoted scalar's `body` (after its opening quote, or a line it goes on to)
/// into `value`; `None` for an escape this reader leaves to the general parser (an unknown
/// one, or a `\` that escapes the line break).
fn scan_quoted<'t>(body: &'t str, double: bool, value: &mut String) -> Option<Scan<'t>> {
    let mut chars = body.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' if double => return Some(Scan::Closed(&body[at + 1..])),
            '\\' if double => value.push(escape(&mut chars)?),
            '\'' if !double => {
                if body[at + 1..].starts_with('\'') {
                    chars.next();
                    value.push('\'');
                } else {
                    return Some(Scan::Closed(&body[at + 1..]));
                }
            }
            c => value.push(c),
        }
    }
    Some(Scan::Open)
}

/// The character an escape stands for (after its `\`), YAML 1.2 §5.7.
fn escape(chars: &mut std::str::CharIndices<'_>) -> Option<char> {
    let hex = |chars: &mut std::str::CharIndices<'_>, digits: usize| {
        let mut code = 0u32;
        for _ in 0..digits {
            code = code * 16 + chars.next()?.1.to_digit(16)?;
        }
        char::from_u32(code)
    };
    Some(match chars.next()?.1 {
        '0' => '\0',
        'a' => '\x07',
        'b' => '\x08',
        't' => '\t',
        'n' => '\n',
        'v' => '\x0b',
        'f' => '\x0c',
        'r' => '\r',
        'e' => '\x1b',
        ' ' => ' ',
        '"' => '"',
        '/' => '/',
        '\\' => '\\',
        'N' => '\u{85}',
        '_' => '\u{a0}',
        'L' => '\u{2028}',
        'P' => '\u{2029}',
        'x' => hex(chars, 2)?,
        'u' => hex(chars, 4)?,
        'U' => hex(chars, 8)?,
        _ => return None,
    })
}

/// Whether what follows a scalar on its line is nothing, or a comment.
fn ends_line(after: &str) -> bool {
    let rest = after.trim_start_matches(' ');
    rest.is_empty() || (rest.starts_with('#') && rest.len() < after.len())
}

/// `text` as a JSON string.
pub(super) fn write_json_string(out: &mut String, text: &str) {
    // Most strings need no escape: one pass (without an early exit, which vectorises) says so.
    let plain = text.bytes().fold(true, |plain, b| plain & (b >= 0x20) & (b != b'"') & (b != b'\\'));
    out.reserve(text.len() + 2);
    out.push('"');
    if plain {
        out.push_str(text);
    } else {
        write_escaped(out, text);
    }
    out.push('"');
}

/// `text` with JSON's escapes, without quotes.
fn write_escaped(out: &mut String, text: &str) {
    let mut from = 0;
    for (at, byte) in text.bytes().enumerate() {
        let escaped = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\t' => "\\t",
            b'\r' => "\\r",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[from..at]);
        if escaped.is_empty() {
            out.push_str(&format!("\\u{byte:04x}"));
        } else {
            out.push_str(escaped);
        }
        from = at + 1;
    }
    out.push_str(&text[from..]);
}

/// How a block scalar ends (YAML 1.2 §8.1.1.2).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Chomping {
    Strip,
    Clip,
    Keep,
}

impl<'t> Reader<'t> {
    /// A scalar that starts on a taken line (`inline`, not empty), in a collection at
    /// `parent`.
    pub(super) fn scalar(&mut self, parent: usize, inline: &str) -> Option<()> {
        match inline.as_bytes()[0] {
            b'"' | b'\'' => self.quoted(parent, inline),
            b'|' | b'>' => self.block_scalar(parent, inline),
            b'[' | b'{' => {
                let empty =
                    ["[]", "{}"].into_iter().find(|e| inline.strip_prefix(e).is_some_and(ends_line))?;
                self.out.push_str(empty);
                Some(())
            }
            _ => self.plain(parent, inline),
        }
    }

    /// A quoted scalar, on its line or folded over the lines below (YAML 1.2 §7.3: a line
    /// break is a space, blank lines are line breaks, spaces around breaks go), as go-yaml
    /// folds long ones at 80 columns.
    fn quoted(&mut self, parent: usize, inline: &str) -> Option<()> {
        if let Some((value, after)) = quoted(inline) {
            return ends_line(after).then(|| write_json_string(&mut self.out, &value));
        }
        let double = inline.starts_with('"');
        let mut value = String::new();
        let mut line = &inline[1..];
        loop {
            match scan_quoted(line, double, &mut value)? {
                Scan::Closed(after) => {
                    return ends_line(after).then(|| write_json_string(&mut self.out, &value))
                }
                Scan::Open => {}
            }
            let kept = line.trim_end_matches(' ');
            let trailing = line.len() - kept.len();
            if trailing > 0 && kept.ends_with('\\') {
                // An escaped space before the break, maybe: the general parser's.
                return None;
            }
            value.truncate(value.len() - trailing);
            let (breaks, next) = self.continuation(parent)?;
            fold(&mut value, true, breaks);
            line = next;
        }
    }

    /// The next line a multi-line flow scalar goes on to (more indented than `parent`), taken,
    /// without its indentation, and the number of blank lines before it.
    fn continuation(&mut self, parent: usize) -> Option<(usize, &'t str)> {
        let mut breaks = 0;
        loop {
            let line = *self.lines.get(self.at)?;
            if line.is_blank() {
                breaks += 1;
                self.at += 1;
                continue;
            }
            if line.indent <= parent {
                return None;
            }
            self.at += 1;
            return Some((breaks, line.content()));
        }
    }

    /// A plain scalar, on its line or folded over the more indented lines below, as go-yaml
    /// folds long ones.
    fn plain(&mut self, parent: usize, inline: &str) -> Option<()> {
        if starts_with_indicator(inline) && !inline.starts_with('-') {
            return None;
        }
        let (first, comment) = match pair_at(inline, b' ', b'#') {
            Some(at) => (&inline[..at], true),
            None => (inline, false),
        };
        let mut text = Cow::Borrowed(first.trim_end_matches(' '));
        if !comment {
            self.plain_lines(parent, &mut text)?;
        }
        if text.ends_with(':') || pair_at(&text, b':', b' ').is_some() {
            return None;
        }
        match resolve(&text)? {
            Plain::Null => self.out.push_str("null"),
            Plain::Bool(b) => self.out.push_str(if b { "true" } else { "false" }),
            Plain::Integer => self.out.push_str(&text),
            Plain::Str => write_json_string(&mut self.out, &text),
        }
        Some(())
    }

    /// The lines a plain scalar goes on to, folded onto `text` (YAML 1.2 §7.3.3: any text
    /// but a comment, and `: `, which the caller refuses); a comment leaves the item to the
    /// general parser.
    fn plain_lines(&mut self, parent: usize, text: &mut Cow<'_, str>) -> Option<()> {
        let goes_on = |line: &&Line<'_>| line.is_blank() || line.indent > parent;
        while self.lines[self.at..].iter().take_while(goes_on).any(|line| !line.is_blank()) {
            let (breaks, line) = self.continuation(parent)?;
            let line = line.trim_end_matches(' ');
            if line.starts_with('#') || pair_at(line, b' ', b'#').is_some() {
                return None;
            }
            let text = text.to_mut();
            fold(text, true, breaks);
            text.push_str(line);
        }
        Some(())
    }

    /// A literal (`|`) or folded (`>`) block scalar whose header is `header`, its lines
    /// below, more indented than `parent`; as libyaml's `yaml_parser_scan_block_scalar`.
    /// Left to the general parser: an indentation indicator, more-indented lines in a folded
    /// scalar, blank lines with more spaces than the content's indentation, an empty scalar.
    fn block_scalar(&mut self, parent: usize, header: &str) -> Option<()> {
        let folded = header.starts_with('>');
        let (chomping, after) = match header.as_bytes().get(1) {
            Some(b'-') => (Chomping::Strip, &header[2..]),
            Some(b'+') => (Chomping::Keep, &header[2..]),
            _ => (Chomping::Clip, &header[1..]),
        };
        if !ends_line(after) {
            return None;
        }
        let (indent, leading) = self.block_indent(parent)?;
        let mut value = "\n".repeat(leading);
        self.at += leading;
        let mut breaks = 0;
        let mut first = true;
        while let Some(&line) = self.lines.get(self.at) {
            if line.is_blank() {
                if line.indent > indent {
                    return None;
                }
                breaks += 1;
                self.at += 1;
                continue;
            }
            if line.indent < indent {
                break;
            }
            let content = &line.text[indent..];
            if folded && content.starts_with(' ') {
                return None;
            }
            if !first {
                fold(&mut value, folded, breaks);
            }
            value.push_str(content);
            first = false;
            breaks = 0;
            self.at += 1;
        }
        // The last content line's break, unless it ended the text.
        let last_break = self.at_break_after_last_content(breaks);
        match chomping {
            Chomping::Strip => {}
            Chomping::Clip => value.push_str(if last_break { "\n" } else { "" }),
            Chomping::Keep => {
                value.push_str(if last_break { "\n" } else { "" });
                value.push_str(&"\n".repeat(breaks));
            }
        }
        write_json_string(&mut self.out, &value);
        Some(())
    }

    /// The content's indentation and the number of blank lines before its first line.
    fn block_indent(&self, parent: usize) -> Option<(usize, usize)> {
        let mut widest_blank = 0;
        for (leading, line) in self.lines[self.at..].iter().enumerate() {
            if line.is_blank() {
                widest_blank = widest_blank.max(line.indent);
                continue;
            }
            // An empty scalar (the next line is not more indented), or blank lines wider than
            // the content: the general parser's.
            return (line.indent > parent && widest_blank <= line.indent).then_some((line.indent, leading));
        }
        None
    }

    /// Whether the last content line read ended with a line break (`breaks` blank lines were
    /// read after it): every line did but the text's last, when the text ends without one.
    fn at_break_after_last_content(&self, breaks: usize) -> bool {
        self.at - breaks < self.lines.len() || self.ends_with_break
    }
}

/// Joins the next line of a scalar with `breaks` blank lines before it onto `value`: folded,
/// a space or the blank lines' breaks; literal, every break.
fn fold(value: &mut String, folded: bool, breaks: usize) {
    match (folded, breaks) {
        (true, 0) => value.push(' '),
        (true, _) => value.extend(std::iter::repeat_n('\n', breaks)),
        (false, _) => value.extend(std::iter::repeat_n('\n', breaks + 1)),
    }
}
