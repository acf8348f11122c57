//! Geometer's own trace format, in CSV or YAML (docs/simulator.md, "Trace format (Geometer)", documents it).
//!
//! CSV header (any column order; only `name` and `arrival_s` are required):
//! `name,arrival_s,duration_s,mig,num_gpu,gpu_milli,cpu_milli,memory_mib,priority,gpu_models,nodes,do_not_disrupt,gang,gang_min`
//!
//! `mig` is `1g.10gb`, `1g.10gb*2` or `1g.10gb*2|3g.40gb`; lists are `|`-separated.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use serde::Deserialize;

use super::records::{Row, Table};
use super::{gangs, seconds_to_millis, GangRef, GpuRequest, Trace, TraceError, TracePod};
use geometer_solver::words::quoted;

const COLUMNS: &[&str] = &[
    "name",
    "arrival_s",
    "duration_s",
    "mig",
    "num_gpu",
    "gpu_milli",
    "cpu_milli",
    "memory_mib",
    "priority",
    "gpu_models",
    "nodes",
    "do_not_disrupt",
    "gang",
    "gang_min",
];

/// The columns every trace has; `gang` and `gang_min` are written only for a trace with gangs.
const PLAIN_COLUMNS: usize = 12;

/// Reads a trace; YAML when the file name ends in `.yaml`/`.yml` or the text starts like YAML.
pub fn parse(file: &str, text: &str) -> Result<Trace, TraceError> {
    let lower = file.to_ascii_lowercase();
    let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or("");
    if lower.ends_with(".yaml") || lower.ends_with(".yml") || first.starts_with("pods:") || first == "---" {
        parse_yaml(file, text)
    } else {
        parse_csv(file, text)
    }
}

pub fn parse_csv(file: &str, text: &str) -> Result<Trace, TraceError> {
    let table = Table::parse(file, text)?;
    table.only(COLUMNS)?;
    table.require("name")?;
    table.require("arrival_s")?;
    if !table.has("mig") && !table.has("num_gpu") {
        table.require("mig")?;
    }
    let mut pods = Vec::new();
    for row in table.rows() {
        pods.push(pod_from_row(&row)?);
    }
    finish(file, pods)
}

fn pod_from_row(row: &Row<'_, '_>) -> Result<TracePod, TraceError> {
    let name = row.get("name");
    if name.is_empty() {
        return Err(row.error("name", "is required"));
    }
    let mig = row.get("mig");
    let num_gpu = row.get("num_gpu");
    let request = match (mig.is_empty(), num_gpu.is_empty()) {
        (false, false) => return Err(row.error("mig", "give either mig or num_gpu/gpu_milli, not both")),
        (true, true) => return Err(row.error("mig", "one of mig or num_gpu is required")),
        (false, true) => GpuRequest::Mig(parse_mig(mig).map_err(|reason| row.error("mig", reason))?),
        (true, false) => GpuRequest::Share {
            num_gpu: row.number("num_gpu", None)?,
            gpu_milli: row.number("gpu_milli", Some(1000))?,
        },
    };
    check_request(&request).map_err(|(field, _, reason)| row.error(field, reason))?;
    let do_not_disrupt = match row.get("do_not_disrupt").to_ascii_lowercase().as_str() {
        "" | "false" | "no" | "0" => false,
        "true" | "yes" | "1" => true,
        _ => return Err(row.error("do_not_disrupt", "must be true or false")),
    };
    Ok(TracePod {
        name: name.to_string(),
        arrival: row.seconds("arrival_s")?.ok_or_else(|| row.error("arrival_s", "is required"))?,
        duration: row.seconds("duration_s")?,
        request,
        cpu_milli: row.number("cpu_milli", Some(0))?,
        memory_mib: row.number("memory_mib", Some(0))?,
        priority: row.number("priority", Some(0))?,
        gpu_models: row.list("gpu_models"),
        nodes: row.list("nodes"),
        do_not_disrupt,
        gang: gang_from_row(row)?,
    })
}

/// `gang` names the pod's gang; `gang_min` (only with `gang`) how many members must hold their
/// slices at once.
fn gang_from_row(row: &Row<'_, '_>) -> Result<Option<GangRef>, TraceError> {
    let name = row.get("gang");
    let min_members = match row.get("gang_min") {
        "" => None,
        _ if name.is_empty() => return Err(row.error("gang_min", "is only valid with a gang")),
        _ => Some(row.number("gang_min", None)?),
    };
    Ok((!name.is_empty()).then(|| GangRef { name: name.to_string(), min_members }))
}

/// `1g.10gb*2|3g.40gb` into `[("1g.10gb", 2), ("3g.40gb", 1)]`, merging repeats.
fn parse_mig(text: &str) -> Result<Vec<(String, u32)>, String> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for item in text.split('|').map(str::trim) {
        let (profile, count) = match item.split_once('*') {
            Some((p, c)) => (
                p.trim(),
                c.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("count in {} is not a whole number", quoted(item)))?,
            ),
            None => (item, 1),
        };
        if profile.is_empty() {
            return Err(format!("item {} has no profile name", quoted(item)));
        }
        let total = counts.entry(profile.to_string()).or_default();
        *total = total.saturating_add(count);
    }
    Ok(counts.into_iter().collect())
}

/// Checks the request's shape; on error returns the field to blame and why.
/// The field at fault in a request, its value as the trace wrote it, and why.
type RequestFault = (&'static str, String, String);

fn check_request(request: &GpuRequest) -> Result<(), RequestFault> {
    match request {
        GpuRequest::Mig(items) => {
            let written = || items.iter().map(|(p, c)| format!("{p}*{c}")).collect::<Vec<_>>().join("|");
            let total: u64 = items.iter().map(|(_, c)| u64::from(*c)).sum();
            if items.iter().any(|(_, c)| *c == 0) {
                return Err(("mig", written(), "every count must be at least 1".into()));
            }
            if total > 64 {
                return Err(("mig", written(), format!("asks for {total} instances; at most 64 per pod")));
            }
        }
        GpuRequest::Share { num_gpu, gpu_milli } => {
            if *num_gpu == 0 || *num_gpu > 64 {
                return Err((
                    "num_gpu",
                    num_gpu.to_string(),
                    "must be between 1 and 64 (CPU-only pods are not GPU demand)".into(),
                ));
            }
            if *gpu_milli == 0 || *gpu_milli > 1000 {
                let reason = "must be between 1 and 1000 thousandths of a GPU".into();
                return Err(("gpu_milli", gpu_milli.to_string(), reason));
            }
            if *gpu_milli < 1000 && *num_gpu > 1 {
                let reason =
                    format!("a share below 1000 is only valid with num_gpu 1 (num_gpu is {num_gpu})");
                return Err(("gpu_milli", gpu_milli.to_string(), reason));
            }
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlTrace {
    pods: Vec<YamlPod>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlPod {
    name: String,
    arrival_s: f64,
    #[serde(default)]
    duration_s: Option<f64>,
    #[serde(default)]
    mig: Option<BTreeMap<String, u32>>,
    #[serde(default)]
    num_gpu: Option<u32>,
    #[serde(default)]
    gpu_milli: Option<u32>,
    #[serde(default)]
    cpu_milli: u64,
    #[serde(default)]
    memory_mib: u64,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    gpu_models: Vec<String>,
    #[serde(default)]
    nodes: Vec<String>,
    #[serde(default)]
    do_not_disrupt: bool,
    #[serde(default)]
    gang: Option<String>,
    #[serde(default)]
    gang_min: Option<u32>,
}

pub fn parse_yaml(file: &str, text: &str) -> Result<Trace, TraceError> {
    let doc: YamlTrace = geometer_solver::yaml::from_str(text)
        .map_err(|e| TraceError::Yaml { file: file.into(), reason: e.to_string() })?;
    let mut pods = Vec::with_capacity(doc.pods.len());
    for (i, p) in doc.pods.into_iter().enumerate() {
        let field = |field: &str, value: String, reason: String| TraceError::Field {
            file: file.into(),
            line: i + 1,
            field: format!("pods[{i}].{field}"),
            value,
            reason,
        };
        let request = match (p.mig, p.num_gpu) {
            (Some(_), Some(_)) => {
                return Err(field("mig", p.name, "give either mig or num_gpu/gpu_milli, not both".into()))
            }
            (None, None) => return Err(field("mig", p.name, "one of mig or num_gpu is required".into())),
            (Some(mig), None) => GpuRequest::Mig(mig.into_iter().collect()),
            (None, Some(num_gpu)) => GpuRequest::Share { num_gpu, gpu_milli: p.gpu_milli.unwrap_or(1000) },
        };
        check_request(&request).map_err(|(f, value, reason)| field(f, value, reason))?;
        let arrival = seconds_to_millis(&p.arrival_s.to_string())
            .map_err(|r| field("arrival_s", p.arrival_s.to_string(), r))?;
        let duration = match p.duration_s {
            Some(d) => {
                Some(seconds_to_millis(&d.to_string()).map_err(|r| field("duration_s", d.to_string(), r))?)
            }
            None => None,
        };
        if p.name.trim().is_empty() {
            return Err(field("name", p.name, "is required".into()));
        }
        if let (None, Some(min)) = (&p.gang, p.gang_min) {
            return Err(field("gang_min", min.to_string(), "is only valid with a gang".into()));
        }
        pods.push(TracePod {
            name: p.name,
            arrival,
            duration,
            request,
            cpu_milli: p.cpu_milli,
            memory_mib: p.memory_mib,
            priority: p.priority,
            gpu_models: p.gpu_models,
            nodes: p.nodes,
            do_not_disrupt: p.do_not_disrupt,
            gang: p.gang.map(|name| GangRef { name, min_members: p.gang_min }),
        });
    }
    finish(file, pods)
}

/// Unique names, pods in arrival order (stable, so equal arrivals keep file order).
fn finish(file: &str, mut pods: Vec<TracePod>) -> Result<Trace, TraceError> {
    let mut seen = HashSet::new();
    for p in &pods {
        if !seen.insert(p.name.as_str()) {
            return Err(TraceError::Invalid {
                file: file.into(),
                reason: format!("pod name {} appears twice", quoted(&p.name)),
            });
        }
    }
    if pods.is_empty() {
        return Err(TraceError::Invalid { file: file.into(), reason: "the trace has no pods".into() });
    }
    gangs::check(file, &pods)?;
    pods.sort_by_key(|p| p.arrival);
    Ok(Trace { pods, notes: Vec::new() })
}

fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        (ms / 1000).to_string()
    } else {
        format!("{}.{:03}", ms / 1000, ms % 1000)
    }
}

/// Writes a trace in the CSV format `parse_csv` reads (the gang columns only when some pod is
/// in a gang).
pub fn to_csv(trace: &Trace) -> String {
    let with_gangs = trace.pods.iter().any(|p| p.gang.is_some());
    let columns = if with_gangs { COLUMNS } else { &COLUMNS[..PLAIN_COLUMNS] };
    let mut out = columns.join(",");
    out.push('\n');
    for p in &trace.pods {
        let (mig, num_gpu, gpu_milli) = match &p.request {
            GpuRequest::Mig(items) => {
                let text: Vec<String> =
                    items.iter().map(|(n, c)| if *c == 1 { n.clone() } else { format!("{n}*{c}") }).collect();
                (text.join("|"), String::new(), String::new())
            }
            GpuRequest::Share { num_gpu, gpu_milli } => {
                (String::new(), num_gpu.to_string(), gpu_milli.to_string())
            }
        };
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            p.name,
            seconds(p.arrival),
            p.duration.map(seconds).unwrap_or_default(),
            mig,
            num_gpu,
            gpu_milli,
            p.cpu_milli,
            p.memory_mib,
            p.priority,
            p.gpu_models.join("|"),
            p.nodes.join("|"),
            p.do_not_disrupt,
        );
        if with_gangs {
            let (name, min) = p.gang.as_ref().map_or((String::new(), String::new()), |g| {
                (g.name.clone(), g.min_members.map(|m| m.to_string()).unwrap_or_default())
            });
            let _ = write!(out, ",{name},{min}");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "name,arrival_s,duration_s,mig,num_gpu,gpu_milli,priority,do_not_disrupt,gpu_models\n\
        a,0,10,1g.10gb*2|3g.40gb,,,5,true,A100-80GB|H100-80GB\n\
        b,1.5,,,1,470,0,,\n";

    #[test]
    fn csv_round_trips() {
        let t = parse("t.csv", CSV).unwrap();
        assert_eq!(t.pods.len(), 2);
        assert_eq!(t.pods[0].request, GpuRequest::Mig(vec![("1g.10gb".into(), 2), ("3g.40gb".into(), 1)]));
        assert_eq!(t.pods[0].gpu_models, ["A100-80GB", "H100-80GB"]);
        assert!(t.pods[0].do_not_disrupt);
        assert_eq!(t.pods[1].arrival, 1500);
        assert_eq!(t.pods[1].duration, None);
        assert_eq!(t.pods[1].request, GpuRequest::Share { num_gpu: 1, gpu_milli: 470 });
        let again = parse("t.csv", &to_csv(&t)).unwrap();
        assert_eq!(again, t);
    }

    #[test]
    fn a_csv_saved_with_a_byte_order_mark_reads_the_same_pods() {
        assert_eq!(parse("t.csv", &format!("\u{feff}{CSV}")).unwrap(), parse("t.csv", CSV).unwrap());
    }

    #[test]
    fn yaml_reads_the_same_pods() {
        let yaml = "pods:\n- name: a\n  arrival_s: 0\n  duration_s: 10\n  mig: {1g.10gb: 2, 3g.40gb: 1}\n  priority: 5\n  do_not_disrupt: true\n  gpu_models: [A100-80GB, H100-80GB]\n- name: b\n  arrival_s: 1.5\n  num_gpu: 1\n  gpu_milli: 470\n";
        assert_eq!(parse("t.yaml", yaml).unwrap(), parse("t.csv", CSV).unwrap());
    }

    #[test]
    fn gangs_round_trip_in_csv_and_read_the_same_from_yaml() {
        let csv = "name,arrival_s,mig,gang,gang_min\nw0,0,1g.10gb,job,2\nw1,0,1g.10gb,job,\nw2,0,1g.10gb,job,\nx,1,2g.20gb,,\n";
        let t = parse("t.csv", csv).unwrap();
        assert_eq!(t.pods[0].gang, Some(GangRef { name: "job".into(), min_members: Some(2) }));
        assert_eq!(t.pods[1].gang, Some(GangRef { name: "job".into(), min_members: None }));
        assert_eq!(t.pods[3].gang, None);
        let text = to_csv(&t);
        assert!(text.lines().next().unwrap().ends_with(",gang,gang_min"), "{text}");
        assert_eq!(parse("t.csv", &text).unwrap(), t);
        let yaml = "pods:\n- {name: w0, arrival_s: 0, mig: {1g.10gb: 1}, gang: job, gang_min: 2}\n- {name: w1, arrival_s: 0, mig: {1g.10gb: 1}, gang: job}\n- {name: w2, arrival_s: 0, mig: {1g.10gb: 1}, gang: job}\n- {name: x, arrival_s: 1, mig: {2g.20gb: 1}}\n";
        assert_eq!(parse("t.yaml", yaml).unwrap(), t);
        // Without gangs the columns are not written: traces from before gangs stay the same.
        let plain = parse("t.csv", CSV).unwrap();
        assert!(!to_csv(&plain).contains("gang"));
    }

    #[test]
    fn gang_errors_name_the_gang() {
        let e = parse("t.csv", "name,arrival_s,mig,gang,gang_min\na,0,1g.10gb,,2\n").unwrap_err().to_string();
        assert!(e.contains("\"gang_min\"") && e.contains("only valid with a gang"), "{e}");
        let e = parse("t.csv", "name,arrival_s,mig,gang,gang_min\na,0,1g.10gb,job,3\nb,0,1g.10gb,job,\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"job\"") && e.contains("has 2 members"), "{e}");
    }

    #[test]
    fn errors_name_field_and_value() {
        let e = parse("t.csv", "name,arrival_s,mig\na,-1,1g.10gb\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("\"arrival_s\"") && e.contains("\"-1\""), "{e}");
        let e = parse("t.csv", "name,arrival_s,num_gpu,gpu_milli\na,0,2,500\n").unwrap_err().to_string();
        assert!(e.contains("\"gpu_milli\"") && e.contains("\"500\""), "{e}");
        let e = parse("t.csv", "name,arrival_s,mig\na,0,1g.10gb*x\n").unwrap_err().to_string();
        assert!(e.contains("\"mig\"") && e.contains("1g.10gb*x"), "{e}");
        let e = parse("t.csv", "name,mig\na,1g.10gb\n").unwrap_err().to_string();
        assert!(e.contains("missing column \"arrival_s\""), "{e}");
        let e = parse("t.csv", "name,arival_s,mig\na,0,1g.10gb\n").unwrap_err().to_string();
        assert!(
            e.contains("unknown column \"arival_s\"") && e.contains("arrival_s"),
            "a misspelt column: {e}"
        );
        let e = parse("t.csv", "name,arrival_s,mig\na,0\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("2 fields"), "{e}");
        let e = parse("t.yaml", "pods:\n- name: a\n  arrival_s: 0\n  gpus: 1\n").unwrap_err().to_string();
        assert!(e.contains("gpus"), "{e}");
        let e = parse("t.csv", "name,arrival_s,mig\na,0,1g.10gb\na,1,1g.10gb\n").unwrap_err().to_string();
        assert!(e.contains("\"a\" appears twice"), "{e}");
    }
}
