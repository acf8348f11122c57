//! YAML reading with limits sized to the input, the one way every Geometer file is read
//! (snapshots, catalogs, policies, mig-parted configs, traces).
//!
//! serde-saphyr guards against hostile YAML with a fixed budget (a million events, 250,000
//! nodes), which a real `kubectl get nodes,pods -A -o yaml` of a large cluster exceeds while
//! JSON of the same objects reads fine. Here the counts that grow with honest input (events,
//! nodes, scalar bytes, documents) are bounded by the input's own length, which no plain
//! document can exceed, while what only hostile input does stays tightly capped: alias
//! expansion (the "billion laughs"), nesting depth, and input past [`MAX_INPUT_BYTES`].

use serde::de::DeserializeOwned;
use serde_saphyr::budget::{Budget, BudgetBreach};
use serde_saphyr::{Error, Options};

/// The largest YAML or JSON text Geometer reads.
pub const MAX_INPUT_BYTES: usize = 1 << 30;
/// Deepest nesting of lists and maps (Kubernetes objects nest about 15 deep). Reading is
/// recursive: deeper input would overflow the stack of a 2 MiB thread (found by fuzzing).
const MAX_DEPTH: usize = 64;

/// Why a YAML text could not be read, in words that say what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct YamlError(pub String);

fn options(text: &str) -> Options {
    let room = text.len().saturating_add(4096);
    // Both structs are non-exhaustive: set fields on their defaults.
    let mut budget = Budget::default();
    budget.max_reader_input_bytes = Some(MAX_INPUT_BYTES);
    budget.max_events = room;
    budget.max_nodes = room;
    budget.max_total_scalar_bytes = room;
    budget.max_documents = room / 4;
    budget.max_depth = MAX_DEPTH;
    budget.flow_nesting_limit = MAX_DEPTH;
    let mut options = Options::default();
    options.budget = Some(budget);
    options
}

fn too_large(text: &str) -> Result<(), YamlError> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(YamlError(format!(
            "the input is {} bytes; at most {MAX_INPUT_BYTES} bytes are read (split it, or select fewer objects)",
            text.len()
        )));
    }
    Ok(())
}

/// One YAML document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    too_large(text)?;
    serde_saphyr::from_str_with_options(text, options(text)).map_err(in_words)
}

/// Every document of a multi-document stream (`---` separated).
pub fn from_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, YamlError> {
    too_large(text)?;
    serde_saphyr::from_multiple_with_options(text, options(text)).map_err(in_words)
}

fn in_words(error: Error) -> YamlError {
    // One line: the error without the quoted input snippet serde-saphyr renders under it.
    let mut error = &error;
    while let Error::AliasError { error: inner, .. } | Error::WithSnippet { error: inner, .. } = error {
        error = inner;
    }
    let text = match error {
        Error::Budget { breach, location } => {
            let at = format!(" (line {}, column {})", location.line(), location.column());
            format!("the YAML {}{at}; Geometer reads plain Kubernetes YAML or JSON", breach_in_words(breach))
        }
        Error::MultipleDocuments { location, .. } => format!(
            "the file holds more than one YAML document (`---` separates them; the second is at \
             line {}); give one document here",
            location.line()
        ),
        other => {
            let text = other.to_string().lines().next().unwrap_or_default().to_string();
            if text.starts_with("recursion limit exceeded") {
                format!("the YAML nests lists and maps too deep ({text})")
            } else {
                crate::words::serde_in_words(&text)
            }
        }
    };
    YamlError(text)
}

fn breach_in_words(breach: &BudgetBreach) -> String {
    match breach {
        BudgetBreach::Depth { depth } => format!("nests lists and maps {depth} deep, more than {MAX_DEPTH}"),
        BudgetBreach::Aliases { aliases } => format!("uses {aliases} aliases (*name), too many to expand"),
        BudgetBreach::Anchors { anchors } => format!("defines {anchors} anchors (&name), too many"),
        BudgetBreach::Documents { documents } => {
            format!("holds {documents} documents, more than its length allows")
        }
        _ => "expands to more than its own length allows: aliases (*name) repeat it too often".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_list_past_the_fixed_budget_reads() {
        // 300,000 scalars: past serde-saphyr's fixed 250,000 nodes.
        let mut text = String::from("items:\n");
        for i in 0..100_000 {
            text.push_str(&format!("- {{a: {i}, b: x}}\n"));
        }
        let v: Value = from_str(&text).unwrap();
        assert_eq!(v["items"].as_array().unwrap().len(), 100_000);
    }

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused_in_words() {
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let e = from_str::<Value>(&bomb).unwrap_err();
        assert!(e.0.starts_with("the YAML ") && !e.0.contains('{'), "{e}");
        let deep = format!("{}1{}", "[".repeat(500), "]".repeat(500));
        let e = from_str::<Value>(&deep).unwrap_err();
        assert!(e.0.contains("deep"), "{e}");
    }

    #[test]
    fn a_second_document_where_one_is_read_is_named_by_its_line() {
        let e = from_str::<Value>("a: 1\n---\nb: 2\n").unwrap_err();
        assert!(e.0.contains("more than one YAML document") && e.0.contains("line 3"), "{e}");
        assert!(!e.0.contains("from_str"), "{e}");
        let docs: Vec<Value> = from_multiple("a: 1\n---\nb: 2\n").unwrap();
        assert_eq!(docs.len(), 2);
    }
}
