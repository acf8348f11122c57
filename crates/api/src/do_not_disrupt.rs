//! Whether a pod may be evicted now: the do-not-disrupt annotations. The one reading of them:
//! the planner (which pods it may count as evictable) and the agent (which pods it evicts)
//! both call [`evaluate`], so a plan never counts on evicting a pod the agent will refuse to.
//!
//! A pod annotated `geometer.dev/do-not-disrupt` or `karpenter.sh/do-not-disrupt` (the keys are
//! configurable) with the value `"true"` is never evicted. A duration (`"30m"`, `"1h30m"`, Go's
//! syntax as Karpenter uses it) protects the pod for that long after it started. `"false"` does
//! not protect. Any other value protects too, because a typo must not cost someone their job;
//! the reason says which value could not be read so it can be fixed.
//!
//! [`comes_back`] says whether an evicted pod would be made again elsewhere, which moving a pod
//! to make room (DynamicMIG compaction) needs: the controller that chooses the pods and the
//! agent that evicts them both call it.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// Whether a pod may be evicted, and if not, why and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Blocked(Blocked),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The annotation that protects the pod.
    pub key: String,
    pub value: String,
    /// When the protection ends; `None`: never (value `"true"` or unreadable).
    pub until: Option<Timestamp>,
    /// One sentence for conditions and events.
    pub why: String,
}

/// Whether a controller other than a DaemonSet owns the pod (`meta`), so that an evicted pod is
/// made again and can run elsewhere: what `kubectl drain` refuses to evict without `--force`
/// otherwise (kubernetes `staging/src/k8s.io/kubectl/pkg/drain/filters.go`).
pub fn comes_back(meta: &ObjectMeta) -> bool {
    let owners = meta.owner_references.iter().flatten();
    owners.filter(|o| o.controller == Some(true)).any(|o| o.kind != "DaemonSet")
}

/// Evaluates the do-not-disrupt annotations of `pod` at `now`. The first key (in `keys` order)
/// that protects the pod wins; protections that already ran out are ignored.
pub fn evaluate(pod: &Pod, keys: &[String], now: Timestamp) -> Verdict {
    evaluate_meta(&pod.metadata, pod.status.as_ref().and_then(|s| s.start_time.as_ref()), keys, now)
}

/// [`evaluate`] from the pod's metadata and `status.startTime`: what a cache that keeps only
/// some of a Pod's fields still has.
pub fn evaluate_meta(
    meta: &ObjectMeta,
    start_time: Option<&Time>,
    keys: &[String],
    now: Timestamp,
) -> Verdict {
    let Some(annotations) = meta.annotations.as_ref() else {
        return Verdict::Allowed;
    };
    for key in keys {
        let Some(value) = annotations.get(key) else { continue };
        match protection(value) {
            Protection::None => continue,
            Protection::Forever => {
                return Verdict::Blocked(Blocked {
                    key: key.clone(),
                    value: value.clone(),
                    until: None,
                    why: format!("annotation {key}={value:?} forbids evicting it"),
                })
            }
            Protection::Unreadable => {
                return Verdict::Blocked(Blocked {
                    key: key.clone(),
                    value: value.clone(),
                    until: None,
                    why: format!(
                    "annotation {key}={value:?} is neither \"true\", \"false\" nor a duration like \"30m\"; \
                         it is treated as do-not-disrupt until it is fixed"
                ),
                })
            }
            Protection::For(duration) => {
                let started = start_time.or(meta.creation_timestamp.as_ref()).map_or(now, |t| t.0);
                let until = add(started, duration);
                if until > now {
                    return Verdict::Blocked(Blocked {
                        key: key.clone(),
                        value: value.clone(),
                        until: Some(until),
                        why: format!("annotation {key}={value:?} forbids evicting it until {until}"),
                    });
                }
            }
        }
    }
    Verdict::Allowed
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protection {
    None,
    Forever,
    Unreadable,
    For(Duration),
}

fn protection(value: &str) -> Protection {
    let value = value.trim();
    if value.eq_ignore_ascii_case("true") {
        Protection::Forever
    } else if value.eq_ignore_ascii_case("false") {
        Protection::None
    } else {
        match parse_go_duration(value) {
            Some(d) => Protection::For(d),
            None => Protection::Unreadable,
        }
    }
}

fn add(start: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d).ok().and_then(|d| start.checked_add(d).ok()).unwrap_or(Timestamp::MAX)
}

/// Parses Go's `time.ParseDuration` syntax: a sequence of decimal numbers with units `ns`,
/// `us` (`µs`), `ms`, `s`, `m`, `h`, e.g. `"1h30m"`, `"1.5h"`, `"300ms"`. Negative durations
/// and bare numbers (other than `"0"`) are refused.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number = &rest[..number_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * seconds_per_unit;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn keys() -> Vec<String> {
        crate::DEFAULT_DO_NOT_DISRUPT_ANNOTATIONS.iter().map(|k| k.to_string()).collect()
    }

    fn pod(annotations: &[(&str, &str)], started: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("train-0".into());
        pod.metadata.annotations =
            Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>());
        pod.status =
            Some(PodStatus { start_time: started.map(|s| Time(s.parse().unwrap())), ..Default::default() });
        pod
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn go_durations_parse_like_go() {
        assert_eq!(parse_go_duration("30m"), Some(Duration::from_secs(1800)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("2h45m10s"), Some(Duration::from_secs(2 * 3600 + 45 * 60 + 10)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "30", "m", "1x", "-5m", "1..5h", "true", "5 m"] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?} must be refused");
        }
    }

    #[test]
    fn a_pod_without_annotations_may_be_evicted() {
        assert_eq!(evaluate(&pod(&[], None), &keys(), at("2025-01-01T00:00:00Z")), Verdict::Allowed);
        let mut bare = Pod::default();
        bare.metadata.annotations = None;
        assert_eq!(evaluate(&bare, &keys(), at("2025-01-01T00:00:00Z")), Verdict::Allowed);
    }

    #[test]
    fn true_protects_forever_under_either_key() {
        for key in crate::DEFAULT_DO_NOT_DISRUPT_ANNOTATIONS {
            let p = pod(&[(key, "true")], Some("2025-01-01T00:00:00Z"));
            match evaluate(&p, &keys(), at("2030-01-01T00:00:00Z")) {
                Verdict::Blocked(b) => {
                    assert_eq!(b.key, key);
                    assert_eq!(b.until, None);
                    assert!(b.why.contains(key), "{}", b.why);
                }
                other => panic!("{key}=true must block, got {other:?}"),
            }
        }
    }

    #[test]
    fn false_does_not_protect_and_other_keys_are_ignored() {
        let p =
            pod(&[("geometer.dev/do-not-disrupt", "false"), ("example.com/do-not-disrupt", "true")], None);
        assert_eq!(evaluate(&p, &keys(), at("2025-01-01T00:00:00Z")), Verdict::Allowed);
        let only_custom = vec!["example.com/do-not-disrupt".to_string()];
        assert!(matches!(evaluate(&p, &only_custom, at("2025-01-01T00:00:00Z")), Verdict::Blocked(_)));
    }

    #[test]
    fn a_duration_counts_from_the_pod_start() {
        let p = pod(&[("karpenter.sh/do-not-disrupt", "30m")], Some("2025-01-01T10:00:00Z"));
        match evaluate(&p, &keys(), at("2025-01-01T10:20:00Z")) {
            Verdict::Blocked(b) => assert_eq!(b.until, Some(at("2025-01-01T10:30:00Z"))),
            other => panic!("20 minutes into a 30m protection must block, got {other:?}"),
        }
        assert_eq!(evaluate(&p, &keys(), at("2025-01-01T10:30:00Z")), Verdict::Allowed);
        assert_eq!(evaluate(&p, &keys(), at("2025-01-01T11:00:00Z")), Verdict::Allowed);
    }

    #[test]
    fn a_pod_not_started_yet_counts_from_its_creation() {
        let mut p = pod(&[("geometer.dev/do-not-disrupt", "1h")], None);
        p.metadata.creation_timestamp = Some(Time(at("2025-01-01T10:00:00Z")));
        assert!(matches!(evaluate(&p, &keys(), at("2025-01-01T10:59:00Z")), Verdict::Blocked(_)));
        assert_eq!(evaluate(&p, &keys(), at("2025-01-01T11:00:01Z")), Verdict::Allowed);
    }

    #[test]
    fn an_unreadable_value_blocks_and_says_so() {
        let p = pod(&[("geometer.dev/do-not-disrupt", "yes please")], None);
        match evaluate(&p, &keys(), at("2025-01-01T00:00:00Z")) {
            Verdict::Blocked(b) => {
                assert_eq!(b.until, None);
                assert!(b.why.contains("yes please") && b.why.contains("30m"), "{}", b.why);
            }
            other => panic!("an unreadable value must block, got {other:?}"),
        }
    }

    fn owned_by(kind: Option<&str>) -> ObjectMeta {
        let owners: Vec<serde_json::Value> = kind
            .map(|k| serde_json::json!({"apiVersion": "apps/v1", "kind": k, "name": "x", "uid": "u", "controller": true}))
            .into_iter()
            .collect();
        serde_json::from_value(serde_json::json!({"name": "p", "ownerReferences": owners})).unwrap()
    }

    #[test]
    fn only_a_pod_a_controller_makes_again_elsewhere_comes_back() {
        assert!(comes_back(&owned_by(Some("ReplicaSet"))));
        assert!(comes_back(&owned_by(Some("StatefulSet"))));
        assert!(!comes_back(&owned_by(Some("DaemonSet"))), "it would come back on the same node");
        assert!(!comes_back(&owned_by(None)), "a bare pod would be gone for good");
    }
}
