//! The syntax of Kubernetes object names, label keys and label values, as kube-apiserver checks
//! it: one home for every part of Geometer that writes or reads them (policy selectors, `migparted
//! import`, object names given on the command line).
//!
//! The rules and their wording follow apimachinery's validators
//! (kubernetes/apimachinery, `pkg/util/validation/validation.go`: `IsDNS1123Subdomain`,
//! `IsQualifiedName`, `IsValidLabelValue`). The in-memory API server keeps its own copy on
//! purpose: it is the test double these rules are checked against (and it is checked against
//! kube-apiserver), so it must not share Geometer's code.

/// Longest object name (a DNS subdomain).
pub const MAX_OBJECT_NAME: usize = 253;
/// Longest label value, and the name part of a label key.
pub const MAX_LABEL_VALUE: usize = 63;

/// Why a name, key or value is not valid, in apimachinery's words; None when it is.
pub fn object_name_problem(name: &str) -> Option<String> {
    if name.len() > MAX_OBJECT_NAME {
        return Some(format!("must be no more than {MAX_OBJECT_NAME} characters"));
    }
    (!is_dns_subdomain(name)).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')".to_string()
    })
}

/// Why `key` is not a label key (an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 characters); None when it is.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if let Some(problem) = object_name_problem(prefix) {
            return Some(format!("prefix part {problem}"));
        }
    }
    if name.is_empty() {
        return Some("name part must be non-empty".to_string());
    }
    if name.len() > MAX_LABEL_VALUE {
        return Some(format!("name part must be no more than {MAX_LABEL_VALUE} characters"));
    }
    (!is_label_text(name)).then(|| {
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')".to_string()
    })
}

/// Why `value` is not a label value (empty, or at most 63 characters of the label alphabet);
/// None when it is.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.len() > MAX_LABEL_VALUE {
        return Some(format!("must be no more than {MAX_LABEL_VALUE} characters"));
    }
    (!value.is_empty() && !is_label_text(value)).then(|| {
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue', 'my_value' or '12345')".to_string()
    })
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

fn is_label_text(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_dns_subdomains() {
        for good in ["a", "gpu-pool.example.com", "mig-parted", "0"] {
            assert_eq!(object_name_problem(good), None, "{good}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", "a_b", "a b", &"a".repeat(254)] {
            assert!(object_name_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn label_keys_take_an_optional_subdomain_prefix() {
        for good in ["pool", "nvidia.com/mig.config", "node-role.kubernetes.io/gpu", "A_b.C"] {
            assert_eq!(label_key_problem(good), None, "{good}");
        }
        let problem = |k: &str| label_key_problem(k).unwrap_or_default();
        assert!(problem("Nvidia.com/x").starts_with("prefix part"));
        assert!(problem("nvidia.com/").starts_with("name part must be non-empty"));
        assert!(problem("bad key").starts_with("name part must consist"));
        assert!(problem(&"k".repeat(64)).contains("no more than 63"));
        assert!(problem("a/b/c").starts_with("prefix part"), "only one slash: {}", problem("a/b/c"));
    }

    #[test]
    fn label_values_may_be_empty_but_not_spaced_or_long() {
        for good in ["", "all-balanced", "1g.10gb", "A_1"] {
            assert_eq!(label_value_problem(good), None, "{good}");
        }
        for bad in ["all balanced", "-x", "x.", "a/b", &"v".repeat(64)] {
            assert!(label_value_problem(bad).is_some(), "{bad}");
        }
    }
}
