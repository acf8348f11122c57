//! The YAML Lists `kubectl get -o yaml` prints, read item by item and fast.
//!
//! A general YAML parser builds a value tree of the whole List on one thread; at 5,000 nodes
//! and 40,000 pods that is most of `geometer plan --snapshot`'s time and memory. kubectl's
//! YAML (go-yaml, through sigs.k8s.io/yaml) is a small part of YAML: block mappings and
//! sequences, plain, quoted and block scalars, `{}` and `[]`. Here the List is split into its
//! items by their `-` lines, and each item is turned into JSON text (decoded like a JSON
//! List's items, on every core). What this reader does not know in an item (anchors, tags,
//! flow collections, `? ` keys, indentation indicators, numbers other than decimal integers,
//! YAML 1.1 booleans) leaves that item to the general parser; what it cannot split (a List
//! that is not kubectl's shape) leaves the whole text to it. The general parser's answer is
//! the reference: the tests compare the two on generated, edited and go-yaml's own output.
//!
//! Block scalars follow libyaml's `yaml_parser_scan_block_scalar` (yaml/libyaml,
//! `src/scanner.c`), which go-yaml ports; scalars folded over lines, the YAML 1.2 spec's line
//! folding (§7.3); the rest, its block styles (§8).

mod scalar;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use serde_json::Value;

/// Nesting deeper than this is left to the general parser, which refuses what is too deep
/// (the reader is recursive, and runs on threads with small stacks).
const MAX_DEPTH: usize = 48;

/// Past this many keys, a mapping whose keys are not sorted is left to the general parser.
const UNSORTED_KEYS: usize = 32;

/// A List's text split into its items.
pub(crate) struct ListText<'t> {
    /// The List's `kind` (`List`, `NodeList`, ...).
    pub kind: String,
    /// Each item's text, from its `-` line to the line before the next item's.
    pub items: Vec<&'t str>,
}

/// The items of a YAML List in kubectl's shape (`apiVersion`, `kind`, `metadata` and `items`
/// at the top, items as a block sequence); `None` for anything else, which the general parser
/// reads whole.
pub(crate) fn split_list(text: &str) -> Option<ListText<'_>> {
    if text.len() > geometer_solver::yaml::MAX_INPUT_BYTES || text.contains('\r') {
        return None;
    }
    let mut header = String::new();
    let mut items = None;
    let mut rest = text;
    while !rest.is_empty() {
        let (line, after) = split_line(rest);
        if let Some(value) = line.strip_prefix("items:") {
            if items.is_some() {
                return None;
            }
            let (body, after) = match value.trim() {
                "" => item_lines(after)?,
                "[]" => (Vec::new(), after),
                _ => return None,
            };
            items = Some(body);
            rest = after;
            continue;
        }
        if ["---", "...", "%"].iter().any(|marker| line.starts_with(marker)) {
            return None;
        }
        header.push_str(line);
        header.push('\n');
        rest = after;
    }
    Some(ListText { kind: list_kind(&header)?, items: items? })
}

/// The List's kind, from the text around its items, which must be a mapping of `apiVersion`,
/// `kind` (ending in `List`) and `metadata` only.
fn list_kind(header: &str) -> Option<String> {
    let Value::Object(header) = geometer_solver::yaml::from_str::<Value>(header).ok()? else {
        return None;
    };
    if header.keys().any(|key| !matches!(key.as_str(), "apiVersion" | "kind" | "metadata")) {
        return None;
    }
    let kind = header.get("kind")?.as_str()?;
    kind.ends_with("List").then(|| kind.to_string())
}

/// The items of a block sequence that starts at `text`, and the text after it; `None` when
/// what follows `items:` is not a block sequence (nor nothing: a key at the left edge).
fn item_lines(text: &str) -> Option<(Vec<&str>, &str)> {
    let mut items = Vec::new();
    let mut column = None;
    let mut item_start = None;
    let mut rest = text;
    while !rest.is_empty() {
        let (line, after) = split_line(rest);
        let Line { indent, .. } = Line::new(line);
        let content = &line[indent..];
        if content.is_empty() || content.starts_with('#') {
            rest = after;
            continue;
        }
        let column = match column {
            Some(column) => column,
            None if is_entry(content) => *column.insert(indent),
            // `items:` and nothing (the List's next key), or a mapping or a scalar.
            None if indent == 0 => break,
            None => return None,
        };
        if indent == column && is_entry(content) {
            let offset = text.len() - rest.len();
            if let Some(start) = item_start.replace(offset) {
                items.push(&text[start..offset]);
            }
        } else if indent <= column {
            break;
        }
        rest = after;
    }
    let end = text.len() - rest.len();
    if let Some(start) = item_start {
        items.push(&text[start..end]);
    }
    Some((items, rest))
}

/// One line (without its newline) and the text after it.
fn split_line(text: &str) -> (&str, &str) {
    match memchr::memchr(b'\n', text.as_bytes()) {
        Some(end) => (&text[..end], &text[end + 1..]),
        None => (text, ""),
    }
}

/// Whether a line's content (after its indentation) is a block sequence entry.
fn is_entry(content: &str) -> bool {
    content == "-" || content.starts_with("- ")
}

/// One item's text (as [`split_list`] gives it) as JSON text; `None` when it holds YAML this
/// reader leaves to the general parser.
pub(crate) fn item_json(item: &str) -> Option<String> {
    if !plain_text(item) {
        return None;
    }
    let (text, ends_with_break) = match item.strip_suffix('\n') {
        Some(text) => (text, true),
        None => (item, false),
    };
    let out = String::with_capacity(item.len());
    let mut reader =
        Reader { lines: lines_of(text), ends_with_break, at: 0, out, depth: 0, keys: Vec::new() };
    let (indent, content) = reader.peek()?;
    reader.sequence_entry(indent, content)?;
    // Anything after the item's node belongs to no node: the general parser says what it is.
    reader.peek().is_none().then_some(reader.out)
}

/// The lines of `text` (split at each `\n`, as `str::split` does).
fn lines_of(text: &str) -> Vec<Line<'_>> {
    let mut lines = Vec::with_capacity(text.len() / 16);
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', text.as_bytes()) {
        lines.push(Line::new(&text[start..end]));
        start = end + 1;
    }
    lines.push(Line::new(&text[start..]));
    lines
}

/// Whether `item` holds only characters YAML allows, without tabs (which YAML allows in
/// some places only): the general parser says what is wrong with any other.
fn plain_text(item: &str) -> bool {
    let ascii_ok = |b: u8| b == b'\n' || (b' '..0x7f).contains(&b);
    if item.bytes().all(ascii_ok) {
        return true;
    }
    // YAML 1.2 §5.1 c-printable.
    item.chars().all(|c| {
        (c.is_ascii() && ascii_ok(c as u8))
            || matches!(c, '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
    })
}

/// A line, and its indentation (the spaces it starts with).
#[derive(Clone, Copy)]
struct Line<'t> {
    text: &'t str,
    indent: usize,
}

impl<'t> Line<'t> {
    fn new(text: &'t str) -> Self {
        Line { text, indent: text.len() - text.trim_start_matches(' ').len() }
    }

    /// The line after its indentation.
    fn content(self) -> &'t str {
        &self.text[self.indent..]
    }

    /// Whether the line holds only spaces.
    fn is_blank(self) -> bool {
        self.indent == self.text.len()
    }
}

/// Reads block YAML line by line, writing JSON.
struct Reader<'t> {
    /// The item's lines; each but the last ended with a line break.
    lines: Vec<Line<'t>>,
    /// Whether the last line did too.
    ends_with_break: bool,
    /// The next line not yet read.
    at: usize,
    out: String,
    depth: usize,
    /// The keys of the mappings being read, outermost first (one buffer for all of them).
    keys: Vec<Cow<'t, str>>,
}

impl<'t> Reader<'t> {
    /// The next line with content (not blank, not only a comment): its indentation and its
    /// content; blank and comment lines before it are passed.
    fn peek(&mut self) -> Option<(usize, &'t str)> {
        while let Some(line) = self.lines.get(self.at) {
            let content = line.content();
            if !content.is_empty() && !content.starts_with('#') {
                return Some((line.indent, content));
            }
            self.at += 1;
        }
        None
    }

    /// The node after `key:` or `-` on a line already taken: `inline` is the rest of that line
    /// (from its first character that is not a space, at `column`), in a collection at
    /// `parent`; `in_mapping` lets a sequence sit at the mapping's own indent, as go-yaml
    /// writes it.
    fn node(&mut self, parent: usize, column: usize, inline: &'t str, in_mapping: bool) -> Option<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let done = if inline.is_empty() || inline.starts_with('#') {
            self.node_below(parent, in_mapping)
        } else if is_entry(inline) {
            // `- - x` or `key: - x`.
            None
        } else if !in_mapping && scalar::key(inline).is_some() {
            // `- key: value`: a mapping that starts on the entry's line.
            self.mapping(column, inline)
        } else {
            self.scalar(parent, inline)
        };
        self.depth -= 1;
        done
    }

    /// A node that starts on the next line (or a null, when nothing does).
    fn node_below(&mut self, parent: usize, in_mapping: bool) -> Option<()> {
        match self.peek() {
            Some((indent, content))
                if indent > parent || (in_mapping && indent == parent && is_entry(content)) =>
            {
                if is_entry(content) {
                    self.sequence(indent)
                } else {
                    let first = self.take_line(indent)?;
                    self.mapping(indent, first)
                }
            }
            _ => {
                self.out.push_str("null");
                Some(())
            }
        }
    }

    /// A block mapping at `indent` whose first entry is `first` (its line taken).
    fn mapping(&mut self, indent: usize, first: &'t str) -> Option<()> {
        let outer = self.keys.len();
        let read = self.mapping_entries(indent, first, outer);
        self.keys.truncate(outer);
        read
    }

    /// The entries of a mapping whose keys go on `self.keys` from `from`.
    fn mapping_entries(&mut self, indent: usize, first: &'t str, from: usize) -> Option<()> {
        self.out.push('{');
        let mut entry = first;
        loop {
            let (key, after) = scalar::key(entry)?;
            let keys = &self.keys[from..];
            // kubectl writes keys sorted: a key after the last has no equal before it. Others
            // are compared with every key before them, up to a few (a long unsorted mapping
            // would cost the square of its length here).
            let sorted = keys.last().is_none_or(|last| *last < key);
            if !sorted && (keys.len() > UNSORTED_KEYS || keys.contains(&key)) {
                // Which of two equal keys wins is the general parser's to say.
                return None;
            }
            if !keys.is_empty() {
                self.out.push(',');
            }
            scalar::write_json_string(&mut self.out, &key);
            self.out.push(':');
            self.keys.push(key);
            let value = after.trim_start_matches(' ');
            let column = indent + (entry.len() - value.len());
            self.node(indent, column, value, true)?;
            match self.peek() {
                Some((next, content)) if next == indent && !is_entry(content) => {
                    entry = self.take_line(indent)?
                }
                Some((next, _)) if next >= indent => return None,
                _ => break,
            }
        }
        self.out.push('}');
        Some(())
    }

    /// A block sequence at `indent`.
    fn sequence(&mut self, indent: usize) -> Option<()> {
        self.out.push('[');
        let mut first = true;
        while let Some((next, content)) = self.peek() {
            if next < indent || (next == indent && !is_entry(content)) {
                break;
            }
            if next > indent {
                return None;
            }
            if !first {
                self.out.push(',');
            }
            first = false;
            self.sequence_entry(indent, content)?;
        }
        self.out.push(']');
        Some(())
    }

    /// One `-` entry at `indent` (its line not yet taken), and its node.
    fn sequence_entry(&mut self, indent: usize, content: &'t str) -> Option<()> {
        if !is_entry(content) {
            return None;
        }
        self.at += 1;
        let value = content[1..].trim_start_matches(' ');
        let column = indent + (content.len() - value.len());
        self.node(indent, column, value, false)
    }

    /// The next content line, which must be at `indent`, taken; its content.
    fn take_line(&mut self, indent: usize) -> Option<&'t str> {
        let (at, content) = self.peek()?;
        if at != indent {
            return None;
        }
        self.at += 1;
        Some(content)
    }
}
