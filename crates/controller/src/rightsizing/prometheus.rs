//! What pods use of their whole GPUs, from dcgm-exporter's metrics through the Prometheus HTTP
//! API (`GET /api/v1/query`, prometheus/prometheus `docs/querying/api.md`), as the same
//! summaries the agents publish.
//!
//! dcgm-exporter labels a GPU's series with the pod the kubelet gave it (`pod`, `namespace`;
//! `exported_pod`, `exported_namespace` when the scrape keeps its own target labels) and the
//! model (`modelName`); a MIG device's series also carry `GPU_I_ID` and are left out: right-sizing
//! looks at whole GPUs. `DCGM_FI_DEV_FB_USED` is in MiB and `DCGM_FI_DEV_GPU_UTIL` in percent
//! (NVIDIA/dcgm-exporter, `etc/default-counters.csv`).

use std::collections::BTreeMap;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use thiserror::Error;

use geometer_api::PodGpuUsage;
use geometer_solver::catalog::Catalog;

#[derive(Debug, Error)]
pub enum PrometheusError {
    #[error("--prometheus {url:?}: {problem}")]
    Url { url: String, problem: String },
    #[error("cannot query Prometheus at {url}: {problem}")]
    Request { url: String, problem: String },
    #[error("Prometheus answered {query:?} with {problem}")]
    Answer { query: String, problem: String },
}

/// `http://host:port` with an optional path prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    authority: String,
    prefix: String,
}

fn endpoint(url: &str) -> Result<Endpoint, PrometheusError> {
    let bad = |problem: &str| PrometheusError::Url { url: url.to_string(), problem: problem.to_string() };
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        bad("only http:// is supported; reach an https Prometheus with `kubectl port-forward`")
    })?;
    let (authority, prefix) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    let authority = if authority.contains(':') { authority.to_string() } else { format!("{authority}:80") };
    let prefix = prefix.trim_end_matches('/');
    Ok(Endpoint { authority, prefix: if prefix.is_empty() { String::new() } else { format!("/{prefix}") } })
}

#[derive(Debug, Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: Vec<Series>,
}

#[derive(Debug, Deserialize)]
struct Series {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// One instant query: each series' labels and value.
async fn query(url: &str, at: &Endpoint, promql: &str) -> Result<Vec<Series>, PrometheusError> {
    let request_error = |problem: String| PrometheusError::Request { url: url.to_string(), problem };
    let stream =
        tokio::net::TcpStream::connect(&at.authority).await.map_err(|e| request_error(e.to_string()))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| request_error(e.to_string()))?;
    tokio::spawn(connection);
    let encoded: String =
        form_urlencoded::Serializer::new(String::new()).append_pair("query", promql).finish();
    let request = http::Request::get(format!("{}/api/v1/query?{encoded}", at.prefix))
        .header(http::header::HOST, &at.authority)
        .body(Empty::<Bytes>::new())
        .map_err(|e| request_error(e.to_string()))?;
    let response = sender.send_request(request).await.map_err(|e| request_error(e.to_string()))?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| request_error(e.to_string()))?.to_bytes();
    let answer_error = |problem: String| PrometheusError::Answer { query: promql.to_string(), problem };
    let answer: Answer = serde_json::from_slice(&body).map_err(|e| {
        answer_error(format!("HTTP {status} and a body that is not the query API's JSON: {e}"))
    })?;
    if answer.status != "success" {
        return Err(answer_error(format!("error: {}", answer.error.unwrap_or_default())));
    }
    let data = answer.data.ok_or_else(|| answer_error("no data".into()))?;
    if data.result_type != "vector" {
        return Err(answer_error(format!("a {} where a vector was expected", data.result_type)));
    }
    Ok(data.result)
}

/// A whole GPU's series: pod (`namespace/name`), node, GPU index.
type SeriesKey = (String, String, String);
/// Each whole GPU's value, with the labels of its series.
type ByKey = BTreeMap<SeriesKey, (f64, BTreeMap<String, String>)>;

fn by_key(list: Vec<Series>) -> ByKey {
    list.into_iter()
        .filter_map(|s| Some((series_key(&s.metric)?, (s.value.1.parse().ok()?, s.metric))))
        .collect()
}

/// The pod, GPU and node of a whole GPU's series; `None` for a MIG device or a GPU no pod holds.
fn series_key(labels: &BTreeMap<String, String>) -> Option<SeriesKey> {
    if labels.contains_key("GPU_I_ID") {
        return None;
    }
    let get =
        |own: &str, plain: &str| labels.get(own).or_else(|| labels.get(plain)).filter(|v| !v.is_empty());
    let pod = format!("{}/{}", get("exported_namespace", "namespace")?, get("exported_pod", "pod")?);
    let node = labels.get("Hostname").cloned().unwrap_or_default();
    Some((pod, node, labels.get("gpu").cloned().unwrap_or_default()))
}

/// Summaries of every pod holding a whole GPU over the last `window` (a PromQL duration).
pub async fn usage(
    url: &str,
    window: &str,
    catalog: &Catalog,
    now: Timestamp,
) -> Result<Vec<PodGpuUsage>, PrometheusError> {
    let at = endpoint(url)?;
    let since = jiff::Span::try_from(parse_window(window).ok_or_else(|| PrometheusError::Url {
        url: url.to_string(),
        problem: format!("--window {window:?} is not a PromQL duration like 7d, 24h or 90m"),
    })?)
    .ok()
    .and_then(|span| now.checked_sub(span).ok())
    .unwrap_or(now);
    let memory = "DCGM_FI_DEV_FB_USED";
    let utilization = "DCGM_FI_DEV_GPU_UTIL";
    let peak = query(url, &at, &format!("max_over_time({memory}[{window}])")).await?;
    let p95 = query(url, &at, &format!("quantile_over_time(0.95, {memory}[{window}])")).await?;
    let samples = query(url, &at, &format!("count_over_time({memory}[{window}])")).await?;
    let mean = query(url, &at, &format!("avg_over_time({utilization}[{window}])")).await?;
    let util_peak = query(url, &at, &format!("max_over_time({utilization}[{window}])")).await?;
    let (p95, samples, mean, util_peak) = (by_key(p95), by_key(samples), by_key(mean), by_key(util_peak));
    let value = |map: &ByKey, key: &SeriesKey| map.get(key).map_or(0.0, |(v, _)| *v);
    let mut out = Vec::new();
    for (key, (peak_mib, labels)) in by_key(peak) {
        let model_name = labels.get("modelName").cloned().unwrap_or_default();
        out.push(PodGpuUsage {
            pod: key.0.clone(),
            gpu: key.2.parse().unwrap_or(0),
            model: catalog.find(&model_name).map_or(model_name, |m| m.key.clone()),
            since: Time(since),
            samples: value(&samples, &key) as u32,
            peak_memory_mib: peak_mib.ceil() as u64,
            p95_memory_mib: value(&p95, &key).ceil() as u64,
            peak_utilization_percent: value(&util_peak, &key).round() as u32,
            mean_utilization_percent: value(&mean, &key).round() as u32,
        });
    }
    Ok(out)
}

/// A PromQL duration of one unit (`7d`, `24h`, `90m`, `30s`, `2w`) as seconds.
fn parse_window(window: &str) -> Option<jiff::SignedDuration> {
    let unit = window.chars().last()?;
    let count: i64 = window[..window.len() - unit.len_utf8()].parse().ok().filter(|n| *n > 0)?;
    let seconds = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        'w' => 604_800,
        _ => return None,
    };
    Some(jiff::SignedDuration::from_secs(count.checked_mul(seconds)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_windows() {
        assert_eq!(
            endpoint("http://prom:9090/prometheus/").unwrap(),
            Endpoint { authority: "prom:9090".into(), prefix: "/prometheus".into() }
        );
        assert_eq!(endpoint("http://prom").unwrap().authority, "prom:80");
        assert!(endpoint("https://prom").unwrap_err().to_string().contains("port-forward"));
        assert_eq!(parse_window("7d"), Some(jiff::SignedDuration::from_hours(168)));
        assert_eq!(parse_window("7x"), None);
        assert_eq!(parse_window("-1h"), None);
    }

    #[test]
    fn mig_devices_and_unheld_gpus_are_not_pods() {
        let labels =
            |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let held = labels(&[
            ("exported_namespace", "ml"),
            ("exported_pod", "a"),
            ("namespace", "gpu-operator"),
            ("pod", "dcgm-x"),
            ("gpu", "3"),
            ("Hostname", "n1"),
        ]);
        assert_eq!(series_key(&held), Some(("ml/a".into(), "n1".into(), "3".into())));
        assert_eq!(series_key(&labels(&[("namespace", "ml"), ("pod", "a"), ("GPU_I_ID", "2")])), None);
        assert_eq!(series_key(&labels(&[("gpu", "0")])), None);
    }
}
