//! Label selectors (query string and `LabelSelector` object forms) and field selectors.

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct LabelSelector {
    reqs: Vec<Requirement>,
    /// A `null` selector object matches nothing (policy/v1 PDB semantics).
    matches_nothing: bool,
}

impl LabelSelector {
    pub(crate) fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(parse_requirement(part)?);
        }
        Ok(LabelSelector { reqs, matches_nothing: false })
    }

    /// From a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    pub(crate) fn from_object(v: &Value) -> Result<LabelSelector, String> {
        if v.is_null() {
            return Ok(LabelSelector { reqs: Vec::new(), matches_nothing: true });
        }
        let mut reqs = Vec::new();
        for (k, val) in v["matchLabels"].as_object().into_iter().flatten() {
            let val = val.as_str().ok_or_else(|| format!("matchLabels[{k}] must be a string, got {val}"))?;
            reqs.push(Requirement { key: k.clone(), op: Op::Eq(val.to_string()) });
        }
        for (i, e) in v["matchExpressions"].as_array().into_iter().flatten().enumerate() {
            let key = e["key"]
                .as_str()
                .ok_or_else(|| format!("matchExpressions[{i}].key is required"))?
                .to_string();
            let values: Vec<String> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect();
            let op = match e["operator"].as_str().unwrap_or("") {
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                other => {
                    return Err(format!(
                        "matchExpressions[{i}].operator: unsupported value \"{other}\" (use In, NotIn, Exists or DoesNotExist)"
                    ))
                }
            };
            reqs.push(Requirement { key, op });
        }
        Ok(LabelSelector { reqs, matches_nothing: false })
    }

    pub(crate) fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        if self.matches_nothing {
            return false;
        }
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(|v| v.as_str());
        self.reqs.iter().all(|r| match &r.op {
            Op::Eq(v) => get(&r.key) == Some(v.as_str()),
            Op::NotEq(v) => get(&r.key) != Some(v.as_str()),
            Op::In(vs) => get(&r.key).is_some_and(|x| vs.iter().any(|v| v == x)),
            Op::NotIn(vs) => get(&r.key).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Op::Exists => get(&r.key).is_some(),
            Op::DoesNotExist => get(&r.key).is_none(),
            Op::Gt(n) => get(&r.key).and_then(|x| x.parse::<i64>().ok()).is_some_and(|x| x > *n),
            Op::Lt(n) => get(&r.key).and_then(|x| x.parse::<i64>().ok()).is_some_and(|x| x < *n),
        })
    }

    /// Matches an object by its `metadata.labels`.
    pub(crate) fn matches_object(&self, obj: &Value) -> bool {
        self.matches(obj["metadata"]["labels"].as_object())
    }
}

/// Splits on commas that are not inside `( )`.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("invalid label selector \"{whole}\": expected a set like (a,b)"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

fn check_key(key: &str, whole: &str) -> Result<String, String> {
    let key = key.trim();
    let valid = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(key.to_string())
    } else {
        Err(format!("invalid label selector \"{whole}\": \"{key}\" is not a valid label key"))
    }
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement { key: check_key(key, part)?, op: Op::DoesNotExist });
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Requirement { key: check_key(k, part)?, op: Op::NotEq(v.trim().to_string()) });
    }
    if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(Requirement { key: check_key(k, part)?, op: Op::Eq(v.trim().to_string()) });
    }
    for (sep, gt) in [('>', true), ('<', false)] {
        if let Some((k, v)) = part.split_once(sep) {
            let n = v
                .trim()
                .parse::<i64>()
                .map_err(|_| format!("invalid label selector \"{part}\": {v} is not an integer"))?;
            return Ok(Requirement { key: check_key(k, part)?, op: if gt { Op::Gt(n) } else { Op::Lt(n) } });
        }
    }
    let mut words = part.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or("");
    let rest = words.next().unwrap_or("").trim();
    if rest.is_empty() {
        return Ok(Requirement { key: check_key(key, part)?, op: Op::Exists });
    }
    if let Some(set) = rest.strip_prefix("notin") {
        return Ok(Requirement { key: check_key(key, part)?, op: Op::NotIn(parse_set(set, part)?) });
    }
    if let Some(set) = rest.strip_prefix("in") {
        return Ok(Requirement { key: check_key(key, part)?, op: Op::In(parse_set(set, part)?) });
    }
    Err(format!("invalid label selector \"{part}\": expected key, !key, key=value, key!=value, key in (..) or key notin (..)"))
}

/// A field selector: `a=b`, `a==b` and `a!=b` terms joined by commas.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    pub(crate) fn parse(s: &str) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        for part in split_unescaped(s, ',') {
            if part.trim().is_empty() {
                continue;
            }
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid field selector \"{part}\": expected field=value or field!=value"
                ));
            };
            terms.push((field.trim().to_string(), equal, unescape(value.trim())));
        }
        Ok(FieldSelector { terms })
    }

    pub(crate) fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|(f, _, _)| f.as_str())
    }

    /// Rewrites field names (used by the events.k8s.io view of events).
    pub(crate) fn rename(&mut self, f: impl Fn(&str) -> Option<String>) {
        for t in &mut self.terms {
            if let Some(n) = f(&t.0) {
                t.0 = n;
            }
        }
    }

    /// The value `metadata.name=x` pins, letting a lookup skip the scan.
    pub(crate) fn exact_name(&self) -> Option<&str> {
        self.terms.iter().find(|(f, eq, _)| f == "metadata.name" && *eq).map(|(_, _, v)| v.as_str())
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|(field, equal, want)| (field_value(obj, field) == *want) == *equal)
    }
}

/// The string a field selector compares against: missing fields read as "".
pub(crate) fn field_value(obj: &Value, field: &str) -> String {
    let path = if field == "source" { "source.component" } else { field };
    let mut cur = obj;
    for p in path.split('.') {
        cur = &cur[p];
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push('\\');
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped || c != '\\' {
            out.push(c);
            escaped = false;
        } else {
            escaped = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn label_selector_forms() {
        let l = labels(json!({"app": "web", "tier": "gpu", "rank": "5"}));
        let yes = [
            "app=web",
            "app==web",
            "app!=db",
            "app in (web,db)",
            "tier notin (cpu)",
            "app",
            "!missing",
            "rank>3",
            "app=web,tier=gpu",
            "",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(Some(&l)), "{s} should match");
        }
        let no = ["app=db", "app notin (web)", "missing", "!app", "rank<3", "app=web,tier=cpu"];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(Some(&l)), "{s} should not match");
        }
        assert_eq!(
            LabelSelector::parse("app in web").unwrap_err(),
            "invalid label selector \"app in web\": expected a set like (a,b)"
        );
        assert_eq!(
            LabelSelector::parse("a b=c").unwrap_err(),
            "invalid label selector \"a b=c\": \"a b\" is not a valid label key"
        );
    }

    #[test]
    fn label_selector_object_and_null() {
        let sel = LabelSelector::from_object(&json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]}))
        .unwrap();
        assert!(sel.matches(Some(&labels(json!({"app": "web", "tier": "gpu"})))));
        assert!(!sel.matches(Some(&labels(json!({"app": "web"})))));
        assert!(LabelSelector::from_object(&json!({})).unwrap().matches(None));
        assert!(!LabelSelector::from_object(&Value::Null).unwrap().matches(None));
        assert_eq!(
            LabelSelector::from_object(&json!({"matchExpressions": [{"key": "a", "operator": "Is"}]}))
                .unwrap_err(),
            "matchExpressions[0].operator: unsupported value \"Is\" (use In, NotIn, Exists or DoesNotExist)"
        );
    }

    #[test]
    fn field_selector_terms() {
        let pod = json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let sel =
            FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed,status.phase!=Succeeded").unwrap();
        assert!(sel.matches(&pod));
        assert!(!FieldSelector::parse("spec.nodeName=").unwrap().matches(&pod));
        assert!(FieldSelector::parse("spec.nodeName!=").unwrap().matches(&pod));
        assert_eq!(FieldSelector::parse("metadata.name=p").unwrap().exact_name(), Some("p"));
        assert_eq!(
            FieldSelector::parse("nonsense").unwrap_err(),
            "invalid field selector \"nonsense\": expected field=value or field!=value"
        );
    }
}
