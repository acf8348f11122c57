//! One fuzz test per parser. Each case must return (an answer or an error) without panicking,
//! within a minute, with no single allocation over 256 MiB; an error must read as the
//! project's errors do: shorter than a screen, in the user's terms, never quoting the
//! library that read the file (its function or type names, a Rust debug struct).

use std::time::{Duration, Instant};

use geometer_api::migparted::MigPartedConfig;
use geometer_controller::adapter;
use geometer_sim::trace::{alibaba, geometer as geometer_trace};
use geometer_solver::catalog::Catalog;
use geometer_solver::geometry;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::allocations::take_largest;
use crate::mutate::{corpus, inputs};

const MAX_ALLOCATION: usize = 256 << 20;
const MAX_CASE: Duration = Duration::from_secs(60);
/// A terminal screen: 25 lines of 80 characters.
const MAX_MESSAGE: usize = 2000;
/// Text that only a library's internals produce: a Rust type or function, a debug struct.
const LIBRARY_TEXT: &[&str] =
    &["from_str", "serde", "saphyr", "expected struct", "expected enum", "Breach", "Some(", "::"];

/// Why `message` does not read as a Geometer error, if it does not.
fn unreadable(message: &str) -> Option<String> {
    if message.chars().count() > MAX_MESSAGE {
        return Some(format!("{} characters, more than a screen", message.chars().count()));
    }
    // What the user wrote is quoted (`...` or "..."): only the words around it are checked.
    let words = unquoted(message);
    if let Some(at) = debug_struct(&words) {
        return Some(format!("prints a Rust debug struct at {at}"));
    }
    LIBRARY_TEXT.iter().find(|t| words.contains(*t)).map(|t| format!("quotes library text {t:?}"))
}

/// `message` without the text between backquotes or double quotes.
fn unquoted(message: &str) -> String {
    let mut open: Option<char> = None;
    message
        .chars()
        .filter(|&c| match open {
            Some(q) if c == q => {
                open = None;
                false
            }
            Some(_) => false,
            None if c == '`' || c == '"' => {
                open = Some(c);
                false
            }
            None => true,
        })
        .collect()
}

/// Where `message` holds `Name { field: ...`, Rust's debug form of a struct.
fn debug_struct(message: &str) -> Option<usize> {
    message.match_indices(" { ").map(|(at, _)| at).find(|&at| {
        let name = message[..at].rsplit(|c: char| !c.is_ascii_alphanumeric()).next().unwrap_or("");
        let field = message[at + 3..].split(':').next().unwrap_or("");
        name.starts_with(|c: char| c.is_ascii_uppercase())
            && !field.is_empty()
            && field.chars().all(|c| c.is_ascii_lowercase() || c == '_')
    })
}

fn cases() -> u32 {
    std::env::var("GEOMETER_FUZZ_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(200)
}

/// Runs `parse` on the inputs of `corpus_name`, failing on a panic, a slow case, a large
/// allocation or an unreadable error. `parse` returns its error, if any; a run where every
/// input is refused (or every one accepted) did not reach the parser's interesting paths
/// and fails.
fn fuzz(corpus_name: &str, parse: impl Fn(&str) -> Result<(), String>) {
    let config = Config { cases: cases(), failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let accepted = std::cell::Cell::new(0u32);
    let result = runner.run(&inputs(corpus(corpus_name)), |text| {
        take_largest();
        let started = Instant::now();
        let answer = parse(&text);
        let (took, largest) = (started.elapsed(), take_largest());
        accepted.set(accepted.get() + u32::from(answer.is_ok()));
        prop_assert!(took < MAX_CASE, "took {took:?}");
        prop_assert!(largest < MAX_ALLOCATION, "allocated {largest} bytes at once");
        if let Some((message, why)) = answer.err().and_then(|m| unreadable(&m).map(|why| (m, why))) {
            let start: String = message.chars().take(400).collect();
            prop_assert!(false, "error {why}: {start}");
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{corpus_name}: {e}");
    }
    let (accepted, all) = (accepted.get(), cases());
    assert!(accepted > 0 && accepted < all, "{corpus_name}: {accepted} of {all} inputs accepted");
}

#[test]
fn snapshots() {
    let catalog = Catalog::builtin();
    fuzz("snapshot", |text| {
        let objects = adapter::parse_objects(text).map_err(|e| e.to_string())?;
        let built = adapter::build_snapshot(&objects, catalog, None, jiff::Timestamp::UNIX_EPOCH)
            .map_err(|e| e.to_string())?;
        built.snapshot.validate(catalog).map_err(|e| e.to_string())
    });
}

#[test]
fn geometry_specs() {
    let catalog = Catalog::builtin();
    let model = catalog.find("H100-80GB").unwrap();
    fuzz("geometry", |text| {
        let spec = geometry::parse_spec(model, text).map_err(|e| e.to_string())?;
        spec.resolve(model).map(drop).map_err(|e| e.to_string())
    });
}

#[test]
fn catalogs() {
    fuzz("catalog", |text| Catalog::from_yaml(text).map(drop).map_err(|e| e.to_string()));
}

#[test]
fn policy_files() {
    fuzz("policy", |text| adapter::parse_policy(text).map(drop).map_err(|e| e.to_string()));
}

#[test]
fn traces() {
    fuzz("trace", |text| {
        let csv = geometer_trace::parse("fuzz.csv", text).map(drop).map_err(|e| e.to_string());
        let yaml = geometer_trace::parse_yaml("fuzz.yaml", text).map(drop).map_err(|e| e.to_string());
        let pods = alibaba::read_pods("fuzz.csv", text).map(drop).map_err(|e| e.to_string());
        let nodes = alibaba::read_nodes("fuzz.csv", text).map(drop).map_err(|e| e.to_string());
        for refused in [&pods, &nodes, &csv, &yaml].into_iter().filter_map(|r| r.as_ref().err()) {
            if unreadable(refused).is_some() {
                return Err(refused.clone());
            }
        }
        csv.or(yaml)
    });
}

#[test]
fn migparted_configs() {
    let catalog = Catalog::builtin();
    fuzz("migparted", |text| {
        let config = MigPartedConfig::parse(text).map_err(|e| e.to_string())?;
        geometer_api::migparted::import::allowed_profiles(&config, None, catalog)
            .map(drop)
            .map_err(|e| e.to_string())
    });
}
