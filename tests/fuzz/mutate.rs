//! Inputs for the parsers: corpus files changed by a few byte-level mutations that tend to
//! find parser bugs (flips, cut-outs, repeats, and tokens YAML and number readers trip on),
//! or arbitrary bytes.

use std::path::Path;

use proptest::prelude::*;

/// Tokens that hit edge cases: huge, negative and fractional numbers, YAML anchors and
/// aliases, unbalanced brackets, quotes, nesting, a string where a list belongs.
const TOKENS: &[&str] = &[
    "99999999999999999999",
    "18446744073709551616",
    "4294967296",
    "-1",
    "1e400",
    "1.5",
    "500m",
    "NaN",
    "&a ",
    "*a",
    "<<: *a",
    "[[[[[[[[",
    "{",
    "}",
    "\"",
    "'",
    "\n- ",
    ": ",
    "\t",
    "~",
    "!!binary ",
    "---\n",
    "\u{0}",
    "é",
    "Ki",
    "Ei",
];

#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    Flip(usize, u8),
    Delete(usize, usize),
    Repeat(usize, usize, usize),
    Token(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::Flip(at, b)),
        (any::<usize>(), 1..64usize).prop_map(|(at, n)| Mutation::Delete(at, n)),
        // A few repeats, or thousands (a value or a list far longer than anyone writes).
        (any::<usize>(), 1..64usize, prop_oneof![2..50usize, 1000..4000usize])
            .prop_map(|(at, n, times)| Mutation::Repeat(at, n, times)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(at, t)| Mutation::Token(at, t)),
    ]
}

fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len().max(1);
        match *m {
            Mutation::Flip(at, b) if !bytes.is_empty() => bytes[at % len] = b,
            Mutation::Delete(at, n) if !bytes.is_empty() => {
                let start = at % len;
                bytes.drain(start..(start + n).min(bytes.len()));
            }
            Mutation::Repeat(at, n, times) if !bytes.is_empty() => {
                let start = at % len;
                let piece: Vec<u8> = bytes[start..(start + n).min(bytes.len())].to_vec();
                let tail = bytes.split_off(start);
                bytes.extend(std::iter::repeat_n(piece, times).flatten());
                bytes.extend(tail);
            }
            Mutation::Token(at, t) => {
                let at = if bytes.is_empty() { 0 } else { at % len };
                bytes.splice(at..at, TOKENS[t].bytes());
            }
            _ => {}
        }
    }
    bytes
}

/// The corpus of one parser: every file under `tests/fuzz/corpus/<name>/`.
pub(crate) fn corpus(name: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus").join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(!seeds.is_empty(), "no corpus in {}", dir.display());
    seeds
}

/// Mutated corpus files, or (one case in five) arbitrary bytes, as text.
pub(crate) fn inputs(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = String> {
    let n = seeds.len();
    let mutated =
        (0..n, prop::collection::vec(mutation(), 0..6)).prop_map(move |(i, ms)| apply(seeds[i].clone(), &ms));
    let arbitrary = prop::collection::vec(any::<u8>(), 0..512);
    prop_oneof![4 => mutated, 1 => arbitrary].prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}
