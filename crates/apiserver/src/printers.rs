//! Default columns of the built-in kinds, as Kubernetes' own printers fill them.

use serde_json::{json, Value};

use super::resource::Builtin;

pub(crate) struct Column {
    pub name: &'static str,
    pub type_: &'static str,
    pub priority: i64,
    pub description: &'static str,
}

const fn col(name: &'static str, priority: i64, description: &'static str) -> Column {
    Column { name, type_: "string", priority, description }
}

pub(crate) fn columns(b: Builtin) -> Vec<Column> {
    match b {
        Builtin::Pod => vec![
            col("Ready", 0, "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", 0, "The aggregate status of the containers in this pod."),
            col("Restarts", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            col("Age", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
            col("IP", 1, "IP address allocated to the pod."),
            col("Node", 1, "Name of the Node this pod is assigned to."),
            col("Nominated Node", 1, "nominatedNodeName is set only when this pod preempts other pods on the node."),
            col("Readiness Gates", 1, "If specified, all readiness gates will be evaluated for pod readiness."),
        ],
        Builtin::Node => vec![
            col("Status", 0, "The status of the node"),
            col("Roles", 0, "The roles of the node"),
            col("Age", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
            col("Version", 0, "Kubelet Version reported by the node."),
            col("Internal-IP", 1, "List of addresses reachable to the node. Queried from cloud provider, if available."),
            col("External-IP", 1, "List of addresses reachable to the node. Queried from cloud provider, if available."),
            col("OS-Image", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
            col("Kernel-Version", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
            col("Container-Runtime", 1, "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
        ],
        Builtin::Namespace => vec![
            col("Status", 0, "The status of the namespace"),
            col("Age", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
        ],
        Builtin::Event | Builtin::EventV1 => vec![
            col("Last Seen", 0, "The time since the event was last seen."),
            col("Type", 0, "Type of this event (Normal, Warning)."),
            col("Reason", 0, "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
            col("Object", 0, "The object this Event is about."),
            col("Message", 0, "A human-readable description of the status of this operation."),
        ],
        Builtin::PodDisruptionBudget => vec![
            col("Min Available", 0, "The minimum number of pods that must be available."),
            col("Max Unavailable", 0, "The maximum number of pods that may be unavailable."),
            col("Allowed Disruptions", 0, "Calculated number of pods that may be disrupted at this time."),
            col("Age", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
        ],
        Builtin::Lease => vec![
            col("Holder", 0, "The holder of the lease."),
            col("Age", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."),
        ],
        Builtin::CustomResourceDefinition => vec![col("Created At", 0, "The time the definition was created.")],
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn or_none(v: String) -> Value {
    if v.is_empty() {
        json!("<none>")
    } else {
        json!(v)
    }
}

fn int_or_string(v: &Value) -> String {
    match v {
        Value::Null => "N/A".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The cells after `Name`, in `columns(b)` order. `age` renders a timestamp as a duration.
pub(crate) fn cells(b: Builtin, obj: &Value, age: &dyn Fn(&Value) -> String) -> Vec<Value> {
    let created = age(&obj["metadata"]["creationTimestamp"]);
    match b {
        Builtin::Pod => pod_cells(obj, created, age),
        Builtin::Node => node_cells(obj, created),
        Builtin::Namespace => vec![json!(s(&obj["status"]["phase"])), json!(created)],
        Builtin::Event | Builtin::EventV1 => {
            let core = if b == Builtin::EventV1 { super::events::to_core(obj) } else { obj.clone() };
            let last = [
                &core["lastTimestamp"],
                &core["eventTime"],
                &core["firstTimestamp"],
                &core["metadata"]["creationTimestamp"],
            ]
            .into_iter()
            .find(|t| !t.is_null())
            .map(age)
            .unwrap_or_default();
            let involved = &core["involvedObject"];
            vec![
                json!(last),
                json!(s(&core["type"])),
                json!(s(&core["reason"])),
                json!(format!("{}/{}", s(&involved["kind"]).to_lowercase(), s(&involved["name"]))),
                json!(s(&core["message"])),
            ]
        }
        Builtin::PodDisruptionBudget => vec![
            json!(int_or_string(&obj["spec"]["minAvailable"])),
            json!(int_or_string(&obj["spec"]["maxUnavailable"])),
            json!(obj["status"]["disruptionsAllowed"].as_i64().unwrap_or(0)),
            json!(created),
        ],
        Builtin::Lease => vec![or_none(s(&obj["spec"]["holderIdentity"]).to_string()), json!(created)],
        Builtin::CustomResourceDefinition => vec![json!(s(&obj["metadata"]["creationTimestamp"]))],
    }
}

fn pod_cells(pod: &Value, created: String, age: &dyn Fn(&Value) -> String) -> Vec<Value> {
    let statuses: Vec<&Value> = pod["status"]["containerStatuses"].as_array().into_iter().flatten().collect();
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = statuses.iter().filter(|c| c["ready"] == true).count();
    let mut restarts = 0;
    let mut last_restart: Option<&Value> = None;
    let mut reason = s(&pod["status"]["phase"]).to_string();
    if let Some(r) = pod["status"]["reason"].as_str() {
        reason = r.to_string();
    }
    if pod["spec"]["schedulingGates"].as_array().is_some_and(|g| !g.is_empty()) && reason == "Pending" {
        reason = "SchedulingGated".into();
    }
    let mut has_running = false;
    for c in statuses.iter().rev() {
        restarts += c["restartCount"].as_i64().unwrap_or(0);
        let finished = &c["lastState"]["terminated"]["finishedAt"];
        if !finished.is_null() && last_restart.is_none_or(|l| s(l) < s(finished)) {
            last_restart = Some(finished);
        }
        let state = &c["state"];
        if let Some(r) = state["waiting"]["reason"].as_str() {
            reason = r.to_string();
        } else if let Some(r) = state["terminated"]["reason"].as_str() {
            reason = r.to_string();
        } else if state["terminated"].is_object() {
            let code = state["terminated"]["exitCode"].as_i64().unwrap_or(0);
            reason = match state["terminated"]["signal"].as_i64() {
                Some(sig) if sig != 0 => format!("Signal:{sig}"),
                _ => format!("ExitCode:{code}"),
            };
        } else if c["ready"] == true && state["running"].is_object() {
            has_running = true;
        }
    }
    if reason == "Completed" && has_running {
        let pod_ready = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        reason = if pod_ready { "Running".into() } else { "NotReady".into() };
    }
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        reason = if pod["status"]["reason"] == "NodeLost" { "Unknown".into() } else { "Terminating".into() };
    }
    let restarts_cell = match last_restart {
        Some(t) => format!("{restarts} ({} ago)", age(t)),
        None => restarts.to_string(),
    };
    let gates = pod["spec"]["readinessGates"].as_array().map_or(0, Vec::len);
    vec![
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        json!(created),
        or_none(s(&pod["status"]["podIP"]).to_string()),
        or_none(s(&pod["spec"]["nodeName"]).to_string()),
        or_none(s(&pod["status"]["nominatedNodeName"]).to_string()),
        if gates == 0 { json!("<none>") } else { json!(format!("0/{gates}")) },
    ]
}

fn node_cells(node: &Value, created: String) -> Vec<Value> {
    let ready = node["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready");
    let mut status = match ready.map(|c| s(&c["status"])) {
        Some("True") => "Ready".to_string(),
        Some("False") => "NotReady".to_string(),
        _ => "Unknown".to_string(),
    };
    if node["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<String> = Vec::new();
    for (k, v) in node["metadata"]["labels"].as_object().into_iter().flatten() {
        if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
            if !role.is_empty() {
                roles.push(role.to_string());
            }
        } else if k == "kubernetes.io/role" && !s(v).is_empty() {
            roles.push(s(v).to_string());
        }
    }
    roles.sort();
    roles.dedup();
    let address = |t: &str| {
        node["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == t)
            .map(|a| s(&a["address"]).to_string())
            .unwrap_or_default()
    };
    let info = &node["status"]["nodeInfo"];
    vec![
        json!(status),
        or_none(roles.join(",")),
        json!(created),
        json!(s(&info["kubeletVersion"])),
        or_none(address("InternalIP")),
        or_none(address("ExternalIP")),
        json!(if s(&info["osImage"]).is_empty() { "<unknown>" } else { s(&info["osImage"]) }),
        json!(if s(&info["kernelVersion"]).is_empty() { "<unknown>" } else { s(&info["kernelVersion"]) }),
        json!(if s(&info["containerRuntimeVersion"]).is_empty() {
            "<unknown>"
        } else {
            s(&info["containerRuntimeVersion"])
        }),
    ]
}
