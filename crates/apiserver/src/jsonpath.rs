//! The JSONPath subset CRD printer columns use: `.a.b`, `['a.b']`, `[0]`, `[*]`, `.*` and
//! filters `[?(@.type=="Ready")]` (also `!=`, and a bare `[?(@.x)]` existence test).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    Wildcard,
    Filter { path: Vec<String>, test: Option<(bool, Value)> },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonPath {
    steps: Vec<Step>,
}

impl JsonPath {
    pub(crate) fn parse(expr: &str) -> Result<JsonPath, String> {
        let mut s = expr.trim();
        if let Some(inner) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            s = inner.trim();
        }
        if !s.starts_with('.') && !s.starts_with('[') {
            return Err("must be a simple JSON path starting with '.' (for example .spec.replicas)".into());
        }
        let chars: Vec<char> = s.chars().collect();
        let mut i = 0;
        let mut steps = Vec::new();
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    i += 1;
                    if i < chars.len() && chars[i] == '.' {
                        return Err("recursive descent '..' is not supported".into());
                    }
                    let start = i;
                    while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                        i += 1;
                    }
                    let name: String = chars[start..i].iter().collect();
                    match name.as_str() {
                        "" if i >= chars.len() && steps.is_empty() => {}
                        "" => return Err(format!("empty field name at offset {start}")),
                        "*" => steps.push(Step::Wildcard),
                        _ => steps.push(Step::Field(name)),
                    }
                }
                '[' => {
                    let end = find_close(&chars, i).ok_or_else(|| format!("unclosed '[' at offset {i}"))?;
                    let inner: String = chars[i + 1..end].iter().collect();
                    steps.push(parse_bracket(inner.trim())?);
                    i = end + 1;
                }
                c => return Err(format!("unexpected '{c}' at offset {i}")),
            }
        }
        Ok(JsonPath { steps })
    }

    /// Every value the path selects, in document order.
    pub(crate) fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![root];
        for step in &self.steps {
            let mut next = Vec::new();
            for v in current {
                match step {
                    Step::Field(name) => {
                        if let Some(x) = v.get(name.as_str()) {
                            next.push(x);
                        }
                    }
                    Step::Index(n) => {
                        if let Some(a) = v.as_array() {
                            let idx = if *n < 0 { a.len() as i64 + n } else { *n };
                            if let Some(x) = usize::try_from(idx).ok().and_then(|i| a.get(i)) {
                                next.push(x);
                            }
                        }
                    }
                    Step::Wildcard => match v {
                        Value::Array(a) => next.extend(a.iter()),
                        Value::Object(m) => next.extend(m.values()),
                        _ => {}
                    },
                    Step::Filter { path, test } => {
                        for item in v.as_array().into_iter().flatten() {
                            let mut target = Some(item);
                            for p in path {
                                target = target.and_then(|t| t.get(p.as_str()));
                            }
                            let keep = match (target, test) {
                                (None, _) => false,
                                (Some(_), None) => true,
                                (Some(t), Some((equal, want))) => (t == want) == *equal,
                            };
                            if keep {
                                next.push(item);
                            }
                        }
                    }
                }
            }
            current = next;
        }
        current
    }
}

fn find_close(chars: &[char], open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut depth = 0;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[' | '(') => depth += 1,
            (None, ')') => depth -= 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<&str> {
    let s = s.trim();
    if s.len() >= 2
        && ((s.starts_with('\'') && s.ends_with('\'')) || (s.starts_with('"') && s.ends_with('"')))
    {
        Some(&s[1..s.len() - 1])
    } else {
        None
    }
}

fn parse_bracket(inner: &str) -> Result<Step, String> {
    if inner == "*" {
        return Ok(Step::Wildcard);
    }
    if let Some(name) = unquote(inner) {
        return Ok(Step::Field(name.to_string()));
    }
    if let Ok(n) = inner.parse::<i64>() {
        return Ok(Step::Index(n));
    }
    if let Some(filter) = inner.strip_prefix("?(").and_then(|r| r.strip_suffix(')')) {
        let filter = filter.trim();
        let (lhs, test) = if let Some((l, r)) = filter.split_once("==") {
            (l, Some((true, literal(r)?)))
        } else if let Some((l, r)) = filter.split_once("!=") {
            (l, Some((false, literal(r)?)))
        } else {
            (filter, None)
        };
        let lhs =
            lhs.trim().strip_prefix('@').ok_or_else(|| format!("filter must start with '@': {filter}"))?;
        let path: Vec<String> = lhs.split('.').filter(|p| !p.is_empty()).map(str::to_string).collect();
        return Ok(Step::Filter { path, test });
    }
    Err(format!("unsupported subscript [{inner}]"))
}

fn literal(s: &str) -> Result<Value, String> {
    if let Some(q) = unquote(s) {
        return Ok(Value::String(q.to_string()));
    }
    serde_json::from_str(s.trim()).map_err(|_| format!("unsupported filter value {s}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selects_fields_indices_and_filters() {
        let obj = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Progressing", "status": "False"}]},
            "spec": {"gpus": [{"id": 0}, {"id": 1}], "a.b": 3}});
        let get = |p: &str| JsonPath::parse(p).unwrap().find(&obj).into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(get(".status.conditions[?(@.type==\"Ready\")].status"), vec![json!("True")]);
        assert_eq!(get(".status.conditions[?(@.type!='Ready')].type"), vec![json!("Progressing")]);
        assert_eq!(get(".spec.gpus[*].id"), vec![json!(0), json!(1)]);
        assert_eq!(get(".spec.gpus[-1].id"), vec![json!(1)]);
        assert_eq!(get("{.spec['a.b']}"), vec![json!(3)]);
        assert!(get(".spec.missing").is_empty());
    }

    #[test]
    fn rejects_what_it_cannot_evaluate() {
        let error = |expr: &str| JsonPath::parse(expr).unwrap_err();
        assert_eq!(
            error("spec.x"),
            "must be a simple JSON path starting with '.' (for example .spec.replicas)"
        );
        assert_eq!(error("..x"), "recursive descent '..' is not supported");
        assert_eq!(error(".a["), "unclosed '[' at offset 2");
    }
}
