//! A JSON List read from a file while it is read: its items are cut from the text as it
//! arrives and decoded in batches on every core, so the whole text is never held at once (a
//! 5,000-node cluster with NVIDIA's DRA driver prints a List of more than 200 MB). What this
//! reader does not take (YAML, one object, text that is not valid JSON, a NodeList whose items
//! omit their kind) is left to [`super::list::parse_objects`] on the whole text, which also
//! says what is wrong with it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read as IoRead};
use std::sync::mpsc;
use std::sync::Mutex;

use super::list::{decode_one, gather, implied_kind, Item, Read};
use super::Objects;

/// The fields of a List as `kubectl get -o json` and the API server write it.
const LIST_KEYS: [&str; 4] = ["apiVersion", "items", "kind", "metadata"];

/// Item text handed to a decoding thread at once.
const BATCH_BYTES: usize = 4 << 20;

/// Why the streaming read stopped: the text is not a JSON List it takes, or reading failed.
enum Stop {
    NotTaken,
    Io(io::Error),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Stop {
        Stop::Io(e)
    }
}

/// The objects of the JSON List `reader` holds; `Ok(None)` when it is not a JSON List this
/// reader takes (read the text whole instead).
pub fn json_list_from(reader: impl IoRead + Send) -> io::Result<Option<Objects>> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (batches, taken) = mpsc::sync_channel::<(usize, Vec<String>)>(workers);
    let taken = Mutex::new(taken);
    let (decoded_tx, decoded) = mpsc::channel::<(usize, Vec<Read<'static>>)>();
    let decode = |decoded_tx: mpsc::Sender<(usize, Vec<Read<'static>>)>| loop {
        let next = taken.lock().map(|rx| rx.recv());
        let Ok(Ok((n, items))) = next else { return };
        let reads = items.into_iter().map(|t| decode_one(Item::Json(Cow::Owned(t)), "")).collect();
        if decoded_tx.send((n, reads)).is_err() {
            return;
        }
    };
    let scanned = std::thread::scope(|scope| {
        let scanner = scope.spawn(move || {
            let mut text = Scanner { inner: BufReader::with_capacity(1 << 20, reader) };
            text.list(&batches)
        });
        for _ in 1..workers {
            let decoded_tx = decoded_tx.clone();
            scope.spawn(move || decode(decoded_tx));
        }
        // This thread decodes a share too: memory freed into a thread's allocator arena is
        // reused by that thread only, and planning runs on this one.
        decode(decoded_tx);
        scanner.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    let kind = match scanned {
        Ok(kind) => kind,
        Err(Stop::NotTaken) => return Ok(None),
        Err(Stop::Io(e)) => return Err(e),
    };
    let in_order: BTreeMap<usize, Vec<Read<'static>>> = decoded.into_iter().collect();
    let reads: Vec<Read<'static>> = in_order.into_values().flatten().collect();
    if !implied_kind(&kind).is_empty() && reads.iter().any(|r| r.kind.is_empty()) {
        return Ok(None); // items that take their kind from the List's, which came after them
    }
    Ok(Some(gather(reads)))
}

/// JSON text read byte by byte from a buffer.
struct Scanner<R> {
    inner: BufReader<R>,
}

impl<R: IoRead> Scanner<R> {
    fn peek(&mut self) -> Result<Option<u8>, Stop> {
        Ok(self.inner.fill_buf()?.first().copied())
    }

    fn skip_whitespace(&mut self) -> Result<(), Stop> {
        loop {
            let buf = self.inner.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            let blank = buf.iter().take_while(|b| b.is_ascii_whitespace()).count();
            let done = blank < buf.len();
            self.inner.consume(blank);
            if done {
                return Ok(());
            }
        }
    }

    /// Takes `byte` after any whitespace.
    fn expect(&mut self, byte: u8) -> Result<(), Stop> {
        self.skip_whitespace()?;
        if self.peek()? != Some(byte) {
            return Err(Stop::NotTaken);
        }
        self.inner.consume(1);
        Ok(())
    }

    /// The top-level object: every item of `items` sent in numbered batches; the List's kind.
    fn list(&mut self, batches: &mpsc::SyncSender<(usize, Vec<String>)>) -> Result<String, Stop> {
        self.expect(b'{')?;
        let mut kind = None;
        let mut sent = 0;
        let mut value = Vec::new();
        loop {
            self.skip_whitespace()?;
            if self.peek()? == Some(b'}') && kind.is_none() && sent == 0 {
                return Err(Stop::NotTaken); // an empty object
            }
            value.clear();
            self.value(&mut value)?;
            let key: String = serde_json::from_slice(&value).map_err(|_| Stop::NotTaken)?;
            self.expect(b':')?;
            match key.as_str() {
                "items" => sent = self.items(batches)?,
                // Not a List's (a planner snapshot's `nodes`, say): left to the whole reader
                // before reading further.
                key if !LIST_KEYS.contains(&key) => return Err(Stop::NotTaken),
                _ => {
                    value.clear();
                    self.value(&mut value)?;
                    let parsed: serde_json::Value =
                        serde_json::from_slice(&value).map_err(|_| Stop::NotTaken)?;
                    if key == "kind" {
                        kind = parsed.as_str().map(str::to_string);
                    }
                }
            }
            self.skip_whitespace()?;
            match self.peek()? {
                Some(b',') => self.inner.consume(1),
                Some(b'}') => {
                    self.inner.consume(1);
                    break;
                }
                _ => return Err(Stop::NotTaken),
            }
        }
        self.skip_whitespace()?;
        match (self.peek()?, kind) {
            (None, Some(kind)) if kind.ends_with("List") && sent > 0 => Ok(kind),
            _ => Err(Stop::NotTaken),
        }
    }

    /// The `items` list, sent in batches; how many batches (at least one, maybe empty).
    fn items(&mut self, batches: &mpsc::SyncSender<(usize, Vec<String>)>) -> Result<usize, Stop> {
        let mut sent = 0;
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut send = |batch: &mut Vec<String>| -> Result<(), Stop> {
            batches.send((sent, std::mem::take(batch))).map_err(|_| Stop::NotTaken)?;
            sent += 1;
            Ok(())
        };
        self.skip_whitespace()?;
        if self.peek()? == Some(b'n') {
            let mut null = Vec::new();
            self.value(&mut null)?;
            return if null == b"null" { send(&mut batch).map(|()| 1) } else { Err(Stop::NotTaken) };
        }
        self.expect(b'[')?;
        self.skip_whitespace()?;
        if self.peek()? == Some(b']') {
            self.inner.consume(1);
        } else {
            loop {
                let mut item = Vec::new();
                self.value(&mut item)?;
                bytes += item.len();
                batch.push(String::from_utf8(item).map_err(|_| Stop::NotTaken)?);
                if bytes >= BATCH_BYTES {
                    send(&mut batch)?;
                    bytes = 0;
                }
                self.skip_whitespace()?;
                match self.peek()? {
                    Some(b',') => self.inner.consume(1),
                    Some(b']') => {
                        self.inner.consume(1);
                        break;
                    }
                    _ => return Err(Stop::NotTaken),
                }
            }
        }
        send(&mut batch)?;
        Ok(sent)
    }

    /// One JSON value's text, appended to `out` as it stands (checked when it is decoded).
    fn value(&mut self, out: &mut Vec<u8>) -> Result<(), Stop> {
        self.skip_whitespace()?;
        let mut cut = Cut::default();
        loop {
            let buf = self.inner.fill_buf()?;
            if buf.is_empty() {
                return Err(Stop::NotTaken);
            }
            let (used, done) = cut.feed(buf);
            out.extend_from_slice(&buf[..used]);
            self.inner.consume(used);
            if done {
                return Ok(());
            }
        }
    }
}

/// Where one JSON value ends, fed its text in pieces: brackets and braces counted outside
/// strings; a bare scalar ends at the first byte that cannot be part of it.
#[derive(Default)]
struct Cut {
    started: bool,
    depth: usize,
    in_string: bool,
    escaped: bool,
    scalar: bool,
}

impl Cut {
    /// How many bytes of `buf` belong to the value, and whether it ends within them.
    fn feed(&mut self, buf: &[u8]) -> (usize, bool) {
        let mut i = 0;
        while i < buf.len() {
            let b = buf[i];
            i += 1;
            if !self.started {
                self.started = true;
                match b {
                    b'{' | b'[' => self.depth = 1,
                    b'"' => self.in_string = true,
                    _ => self.scalar = true,
                }
            } else if self.scalar {
                if matches!(b, b',' | b']' | b'}') || b.is_ascii_whitespace() {
                    return (i - 1, true);
                }
            } else if self.escaped {
                self.escaped = false;
            } else if self.in_string {
                // Most of a List's text is strings: jump to the next quote or escape.
                let Some(at) = memchr::memchr2(b'"', b'\\', &buf[i - 1..]) else { return (buf.len(), false) };
                i += at;
                if buf[i - 1] == b'\\' {
                    self.escaped = true;
                } else {
                    self.in_string = false;
                    if self.depth == 0 {
                        return (i, true);
                    }
                }
            } else {
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            return (i, true);
                        }
                    }
                    _ => {}
                }
            }
        }
        (buf.len(), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::list::list_objects;

    /// A reader that hands out a few bytes at a time, so values are cut across reads.
    struct Trickle<'t>(&'t [u8]);

    impl IoRead for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.0.len()).min(7);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn streamed(text: &str) -> Option<Objects> {
        json_list_from(Trickle(text.as_bytes())).unwrap()
    }

    const LIST: &str = r#"{"apiVersion": "v1", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b \"}]"}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "ns"}, "spec": {"containers": []}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "ns"}, "spec": {"containers": []}},
        42
    ], "kind": "List", "metadata": {"resourceVersion": ""}}"#;

    #[test]
    fn a_list_read_while_it_streams_in_gives_what_reading_it_whole_gives() {
        let whole = list_objects(LIST).unwrap();
        let streamed = streamed(LIST).unwrap();
        assert_eq!(streamed.nodes.len(), 1);
        assert_eq!(streamed.pods.len(), 1, "the second pod of the same name is skipped");
        assert_eq!(format!("{:?}", streamed.skipped), format!("{:?}", whole.skipped));
        assert_eq!(streamed.skipped.len(), 2, "{:?}", streamed.skipped);
    }

    #[test]
    fn what_is_not_a_json_list_is_left_to_the_whole_reader() {
        for text in [
            "kind: List\nitems: []\n",
            r#"{"kind": "Node", "metadata": {"name": "n1"}}"#,
            r#"{"kind": "List", "items": [{"kind": "Node"}"#,
            r#"{"kind": "List", "items": [{"kind": "Node"}]} trailing"#,
            r#"{"kind": "List", "items": {"kind": "Node"}}"#,
            r#"{"items": [{"metadata": {"name": "n1"}}], "kind": "NodeList"}"#,
            r#"{"nodes": [{"name": "n1", "gpus": []}], "pending": []}"#,
            "",
        ] {
            assert!(streamed(text).is_none(), "{text}");
        }
    }

    proptest::proptest! {
        /// Any value's text, fed in pieces of any size and followed by more text, is cut
        /// exactly where it ends: strings holding quotes, escapes and brackets included.
        #[test]
        fn a_value_is_cut_where_it_ends(
            words in proptest::collection::vec("[a-z\\\\\"{}\\[\\],: ]{0,6}", 0..6),
            number in proptest::num::i64::ANY,
            piece in 1usize..9,
        ) {
            let value = serde_json::json!({"a": [words.clone(), {"n": number}], "s": words.concat()});
            for text in [value.to_string(), serde_json::to_string_pretty(&value).unwrap(), number.to_string(), serde_json::json!(words.concat()).to_string()] {
                let followed = format!("{text}, {{\"next\": 1}}]");
                let mut cut = Cut::default();
                let mut taken = 0;
                for chunk in followed.as_bytes().chunks(piece) {
                    let (used, done) = cut.feed(chunk);
                    taken += used;
                    if done {
                        break;
                    }
                }
                proptest::prop_assert_eq!(&followed[..taken], text.as_str());
            }
        }
    }

    #[test]
    fn an_empty_or_null_item_list_reads_as_no_objects() {
        for text in [r#"{"items": [], "kind": "List"}"#, r#"{"items": null, "kind": "PodList"}"#] {
            let objects = streamed(text).unwrap();
            assert!(
                objects.nodes.is_empty() && objects.pods.is_empty() && objects.skipped.is_empty(),
                "{text}"
            );
        }
    }
}
