//! A stable fingerprint of what a planning round depends on, so that a second round over the
//! same world publishes no new plan.
//!
//! Stable across processes and releases: it hashes a canonical JSON form (object keys sorted,
//! no whitespace) with 64-bit FNV-1a, which, unlike `std`'s `DefaultHasher`, is specified and
//! never reseeded. The value is stored on each plan (annotation), so a restarted controller
//! recognises the world it already planned for.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Fingerprint(u64);

impl Fingerprint {
    /// Fingerprint of any serialisable value. Callers put in only what matters for planning
    /// (no resourceVersions or timestamps) and sort lists whose order carries no meaning.
    pub(crate) fn of<T: Serialize + ?Sized>(value: &T) -> Fingerprint {
        let mut hasher = Fnv1a::new();
        match serde_json::to_value(value) {
            Ok(v) => write_canonical(&v, &mut hasher),
            // Only maps whose keys are neither strings nor numbers fail; the planning input has
            // none. Hashing the error keeps the result deterministic rather than panicking.
            Err(e) => hasher.write(e.to_string().as_bytes()),
        }
        Fingerprint(hasher.finish())
    }

    #[cfg(test)]
    pub(crate) fn from_raw(raw: u64) -> Fingerprint {
        Fingerprint(raw)
    }

    /// The first `len` hex digits (at most 16), for names such as `gpu-pool-20250101-120000-3fa9c2`.
    pub(crate) fn short(&self, len: usize) -> String {
        let full = self.to_string();
        full[..len.min(full.len())].to_string()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

struct Fnv1a(u64);

impl Fnv1a {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Self {
        Fnv1a(Self::OFFSET)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// JSON with sorted object keys, written straight into the hasher. Strings go through
/// serde_json so that escaping is exact and `"a,b"` never reads like two values.
fn write_canonical(value: &Value, out: &mut Fnv1a) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.write(b"{");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.write(b",");
                }
                write_canonical(&Value::String(key.clone()), out);
                out.write(b":");
                write_canonical(&map[key], out);
            }
            out.write(b"}");
        }
        Value::Array(items) => {
            out.write(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write(b",");
                }
                write_canonical(item, out);
            }
            out.write(b"]");
        }
        scalar => out.write(scalar.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_matter() {
        let a = json!({"nodes": [{"name": "n1", "gpus": 8}], "pending": ["a/p1"]});
        let b = json!({"pending": ["a/p1"], "nodes": [{"gpus": 8, "name": "n1"}]});
        assert_eq!(Fingerprint::of(&a), Fingerprint::of(&b));
    }

    #[test]
    fn any_relevant_difference_changes_it() {
        let base = json!({"pending": ["a/p1"], "gpu": ["1g.10gb@0"]});
        for other in [
            json!({"pending": ["a/p1", "a/p2"], "gpu": ["1g.10gb@0"]}),
            json!({"pending": ["a/p1"], "gpu": ["1g.10gb@1"]}),
            json!({"pending": ["a/p1"], "gpu": []}),
            json!({"pending": "a/p1", "gpu": ["1g.10gb@0"]}),
        ] {
            assert_ne!(Fingerprint::of(&base), Fingerprint::of(&other), "{other}");
        }
    }

    #[test]
    fn strings_cannot_imitate_structure() {
        assert_ne!(Fingerprint::of(&json!(["a", "b"])), Fingerprint::of(&json!(["a\",\"b"])));
    }

    #[test]
    fn value_is_stable_across_releases() {
        // Plans carry this value in an annotation; changing the algorithm would make every
        // controller upgrade publish a fresh plan for an unchanged cluster.
        assert_eq!(Fingerprint::of(&json!({"b": 1, "a": [true, null]})).to_string(), {
            let mut h = Fnv1a::new();
            h.write(br#"{"a":[true,null],"b":1}"#);
            format!("{:016x}", h.finish())
        });
        let mut empty = Fnv1a::new();
        empty.write(b"");
        assert_eq!(empty.finish(), 0xcbf2_9ce4_8422_2325);
        let mut a = Fnv1a::new();
        a.write(b"a");
        assert_eq!(a.finish(), 0xaf63_dc4c_8601_ec8c, "FNV-1a 64 test vector for \"a\"");
    }

    #[test]
    fn the_short_form_is_a_prefix_of_the_16_hex_digits() {
        let f = Fingerprint::of(&json!({"x": 1}));
        assert_eq!(f.to_string().len(), 16);
        assert!(f.to_string().chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(f.short(6).len(), 6);
        assert!(f.to_string().starts_with(&f.short(6)));
    }
}
