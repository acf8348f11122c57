//! `kubectl get nodes,pods -A -o yaml` of a large cluster, shaped as kubectl prints it: a `List`
//! of Nodes with the fields a kubelet reports (labels, addresses, capacity and allocatable,
//! conditions, node info, images) and Pods with their spec and status. Some nodes carry eight
//! H100s in MIG mode as the GPU Operator labels them; the rest are CPU nodes. Pods ask for MIG
//! slices; some are bound and running, some Pending and unschedulable. [`kubectl_list`] adds the
//! MigNode each GPU node's agent publishes (`kubectl get nodes,pods,mignodes -A -o json`); the
//! controller scale bench seeds the same objects into the in-memory API server.

use serde_json::{json, Value};

/// The List as YAML, with `nodes` nodes (every `gpu_every`-th one a GPU node) and `pods` pods
/// (one in four Pending, the rest Running).
pub fn kubectl_yaml(nodes: usize, gpu_every: usize, pods: usize) -> String {
    let bound = |i: usize| !i.is_multiple_of(4);
    serde_saphyr::to_string(&list(nodes, gpu_every, pods, bound)).expect("YAML")
}

/// The List with `running` Running pods and then `pending` Pending ones, and a MigNode per GPU
/// node whose instances the running pods hold (as `kubectl get -o json` would parse).
pub fn kubectl_list(nodes: usize, gpu_every: usize, running: usize, pending: usize) -> Value {
    let mut list = list(nodes, gpu_every, running + pending, |i| i < running);
    let gpu_nodes = gpu_nodes(nodes, gpu_every);
    let mut holders: Vec<Vec<String>> = vec![Vec::new(); gpu_nodes.len()];
    for i in 0..running {
        holders[slot(i, gpu_nodes.len())].push(format!("{}/{}", namespace(i), pod_name(i)));
    }
    let items = list["items"].as_array_mut().expect("items");
    items.extend(gpu_nodes.iter().zip(&holders).map(|(&n, pods)| mig_node(n, pods)));
    list
}

fn list(nodes: usize, gpu_every: usize, pods: usize, bound: impl Fn(usize) -> bool) -> Value {
    let mut items: Vec<Value> = (0..nodes).map(|i| node(i, i.is_multiple_of(gpu_every))).collect();
    let gpu_nodes = gpu_nodes(nodes, gpu_every);
    items.extend((0..pods).map(|i| pod(i, gpu_nodes[slot(i, gpu_nodes.len())], bound(i))));
    json!({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}})
}

fn gpu_nodes(nodes: usize, gpu_every: usize) -> Vec<usize> {
    (0..nodes).step_by(gpu_every).collect()
}

/// Which of the `gpu_nodes` GPU nodes (by position) pod `i` is on, or would be once bound:
/// round robin. The pods' `nodeName` and the MigNodes' instance holders both follow it.
fn slot(i: usize, gpu_nodes: usize) -> usize {
    i % gpu_nodes
}

fn node_name(i: usize) -> String {
    format!("ip-10-{}-{}-{}.ec2.internal", i / 65536, (i / 256) % 256, i % 256)
}

fn pod_name(i: usize) -> String {
    format!("infer-{i}")
}

fn namespace(i: usize) -> String {
    format!("team-{}", i % 20)
}

/// The agent's MigNode for GPU node `i`: eight H100-80GB in MIG mode, each split into seven
/// 1g.10gb, the instances held by `pods` (`namespace/name`) in order, seven to a GPU.
fn mig_node(i: usize, pods: &[String]) -> Value {
    let gpus: Vec<Value> = (0..8)
        .map(|g| {
            let instances: Vec<Value> = (0..7)
                .map(|s| {
                    let mut inst = json!({"profile": "1g.10gb", "start": s, "size": 1, "gpuInstanceId": 9 + s,
                        "computeInstanceId": 0, "uuid": format!("MIG-{i:08x}-{g}-{s}")});
                    if let Some(pod) = pods.get(g * 7 + s) {
                        inst["pod"] = json!(pod);
                    }
                    inst
                })
                .collect();
            json!({"index": g, "uuid": format!("GPU-{i:08x}-{g}"), "model": "H100-80GB", "pciDeviceId": "0x233010DE",
                "migMode": {"current": true, "pending": true}, "instances": instances})
        })
        .collect();
    json!({"apiVersion": "geometer.dev/v1alpha1", "kind": "MigNode",
        "metadata": {"name": node_name(i), "generation": 1, "uid": format!("m{i:07x}"), "resourceVersion": format!("{}", 200_000 + i),
            "creationTimestamp": "2026-11-01T10:05:00Z"},
        "spec": {"gpus": []},
        "status": {"gpus": gpus, "gpuCount": 8, "phase": "Ready", "observedGeneration": 1}})
}

fn node(i: usize, gpu: bool) -> Value {
    let name = node_name(i);
    let mut labels = json!({
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": if gpu { "p5.48xlarge" } else { "m7i.8xlarge" },
        "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": format!("us-east-1{}", ["a", "b", "c"][i % 3]),
        "karpenter.sh/nodepool": if gpu { "gpu" } else { "general" },
    });
    let mut capacity = json!({"cpu": "32", "ephemeral-storage": "104845292Ki", "hugepages-1Gi": "0",
        "hugepages-2Mi": "0", "memory": "130451456Ki", "pods": "110"});
    if gpu {
        let l = labels.as_object_mut().unwrap();
        l.insert("nvidia.com/gpu.product".into(), json!("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"));
        l.insert("nvidia.com/gpu.count".into(), json!("8"));
        l.insert("nvidia.com/mig.config".into(), json!("all-1g.10gb"));
        l.insert("nvidia.com/mig-1g.10gb.count".into(), json!("56"));
        l.insert("nvidia.com/mig.strategy".into(), json!("mixed"));
        capacity["nvidia.com/mig-1g.10gb"] = json!("56");
    }
    let conditions: Vec<Value> = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        .iter()
        .map(|t| {
            json!({"type": t, "status": if *t == "Ready" { "True" } else { "False" },
            "lastHeartbeatTime": "2026-11-30T10:00:00Z", "lastTransitionTime": "2026-11-01T10:00:00Z",
            "reason": format!("Kubelet{t}"), "message": format!("kubelet reports {t}")})
        })
        .collect();
    let images: Vec<Value> = (0..8)
        .map(|k| {
            json!({"names": [format!("registry.example.com/team/image-{k}@sha256:{:064x}", k * 7919 + i),
            format!("registry.example.com/team/image-{k}:v1.{k}")], "sizeBytes": 100_000_000 + k * 1_000_000})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("{:08x}-0000-4000-8000-{:012x}", i, i), "resourceVersion": format!("{}", 100_000 + i),
            "creationTimestamp": "2026-11-01T10:00:00Z", "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"providerID": format!("aws:///us-east-1a/i-{:017x}", i)},
        "status": {"addresses": [{"type": "InternalIP", "address": format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256)},
                {"type": "Hostname", "address": name}],
            "allocatable": capacity.clone(), "capacity": capacity, "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}, "images": images,
            "nodeInfo": {"architecture": "amd64", "bootID": format!("{i:x}"), "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.1.112", "kubeProxyVersion": "v1.32.0", "kubeletVersion": "v1.32.0",
                "machineID": format!("{i:032x}"), "operatingSystem": "linux", "osImage": "Amazon Linux 2023", "systemUUID": format!("{i:032x}")}}})
}

fn pod(i: usize, gpu_node: usize, bound: bool) -> Value {
    let node = node_name(gpu_node);
    let mut spec = json!({"containers": [{"name": "main", "image": "registry.example.com/team/infer:v3",
            "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}, "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/mig-1g.10gb": "1"}},
            "env": [{"name": "MODEL", "value": "small"}], "terminationMessagePath": "/dev/termination-log"}],
        "restartPolicy": "Always", "schedulerName": "default-scheduler", "serviceAccountName": "default",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]});
    let status = if bound {
        spec["nodeName"] = json!(node);
        json!({"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
            "hostIP": "10.0.0.1", "podIP": format!("100.64.{}.{}", i / 256 % 256, i % 256), "startTime": "2026-11-30T09:00:00Z"})
    } else {
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/5000 nodes are available: 5000 Insufficient nvidia.com/mig-3g.40gb."}]})
    };
    if !bound {
        // Pending: mostly 3g.40gb (no GPU offers one yet), some 1g.10gb and 2g.20gb; one in four
        // tied to a zone.
        let profile = ["3g.40gb", "3g.40gb", "1g.10gb", "2g.20gb"][i % 4];
        spec["containers"][0]["resources"] = json!({"limits": {format!("nvidia.com/mig-{profile}"): "1"}, "requests": {"cpu": "2", "memory": "8Gi"}});
        if i.is_multiple_of(4) {
            spec["nodeSelector"] =
                json!({"topology.kubernetes.io/zone": format!("us-east-1{}", ["a", "b", "c"][i / 4 % 3])});
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(i), "namespace": namespace(i), "uid": format!("p{i:07x}"),
            "labels": {"app": "infer"}, "creationTimestamp": "2026-11-30T09:00:00Z"},
        "spec": spec, "status": status})
}

/// [`kubectl_list`] as a cluster where NVIDIA's DRA driver (static MIG) advertises every GPU
/// node, as `kubectl get nodes,pods,mignodes,resourceslices,resourceclaims,resourceclaimtemplates,deviceclasses -A -o json`
/// prints it: the GPU nodes advertise no `nvidia.com/*` resource, each has a ResourceSlice
/// listing its MIG devices (with the driver's attributes), each pod asks through a claim made
/// from its namespace's template for its profile (allocated, and reserved for it, for a running
/// pod; not yet allocated for a pending one), and the agents report the DRA stack.
pub fn kubectl_dra_list(nodes: usize, gpu_every: usize, running: usize, pending: usize) -> Value {
    let mut list = kubectl_list(nodes, gpu_every, running, pending);
    let items = list["items"].as_array_mut().expect("items");
    let mut held: std::collections::HashMap<String, (String, String)> = std::collections::HashMap::new();
    let mut extra = vec![
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "mig.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}}]}}),
    ];
    for item in items.iter_mut().filter(|i| i["kind"] == "MigNode") {
        let node = item["metadata"]["name"].as_str().unwrap_or_default().to_string();
        item["status"]["deviceStack"] = json!("DraStaticMig");
        let mut devices = Vec::new();
        for gpu in item["status"]["gpus"].as_array().into_iter().flatten() {
            for instance in gpu["instances"].as_array().into_iter().flatten() {
                let device = format!("gpu-{}-mig-1g10gb-19-{}", gpu["index"], instance["start"]);
                if let Some(pod) = instance["pod"].as_str() {
                    held.insert(pod.to_string(), (node.clone(), device.clone()));
                }
                devices.push(json!({"name": device, "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.10gb"},
                    "uuid": {"string": instance["uuid"]}, "parentUUID": {"string": gpu["uuid"]},
                    "productName": {"string": "NVIDIA H100 80GB HBM3"}, "brand": {"string": "Nvidia"}, "architecture": {"string": "Hopper"}},
                    "capacity": {"memory": {"value": "10240Mi"}, format!("memorySlice{}", instance["start"]): {"value": "1"}}}));
            }
        }
        extra.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{node}-gpu.nvidia.com")},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices}}));
    }
    let mut templates = std::collections::BTreeSet::new();
    for item in items.iter_mut() {
        if item["kind"] == "Node" && item["metadata"]["labels"].get("nvidia.com/gpu.count").is_some() {
            for field in ["capacity", "allocatable"] {
                item["status"][field].as_object_mut().map(|m| m.remove("nvidia.com/mig-1g.10gb"));
            }
            let labels = item["metadata"]["labels"].as_object_mut().expect("labels");
            for label in ["nvidia.com/mig.config", "nvidia.com/mig-1g.10gb.count", "nvidia.com/mig.strategy"]
            {
                labels.remove(label);
            }
        }
        if item["kind"] != "Pod" {
            continue;
        }
        let (ns, name) = (item["metadata"]["namespace"].clone(), item["metadata"]["name"].clone());
        let key = format!("{}/{}", ns.as_str().unwrap_or_default(), name.as_str().unwrap_or_default());
        let resources = &mut item["spec"]["containers"][0]["resources"];
        let mut profile = "1g.10gb".to_string();
        for field in ["limits", "requests"] {
            let Some(map) = resources[field].as_object_mut() else { continue };
            let names: Vec<String> =
                map.keys().filter(|k| k.starts_with("nvidia.com/mig-")).cloned().collect();
            for name in names {
                map.remove(&name);
                profile = name.trim_start_matches("nvidia.com/mig-").to_string();
            }
        }
        resources["claims"] = json!([{"name": "gpu"}]);
        let template = format!("mig-{}", profile.replace('.', "-"));
        templates.insert((ns.as_str().unwrap_or_default().to_string(), template.clone(), profile.clone()));
        let claim = format!("{}-gpu", name.as_str().unwrap_or_default());
        item["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimTemplateName": template}]);
        item["status"]["resourceClaimStatuses"] = json!([{"name": "gpu", "resourceClaimName": claim}]);
        let mut object = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim, "namespace": ns},
            "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com",
                "selectors": [{"cel": {"expression": format!("device.attributes['gpu.nvidia.com'].profile == '{profile}'")}}]}}]}}});
        if let Some((pool, device)) = held.get(&key) {
            object["status"] = json!({"allocation": {"devices": {"results": [{"request": "mig", "driver": "gpu.nvidia.com", "pool": pool, "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": name, "uid": item["metadata"]["uid"]}]});
        }
        extra.push(object);
    }
    for (ns, template, profile) in templates {
        extra.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": template, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com",
                "selectors": [{"cel": {"expression": format!("device.attributes['gpu.nvidia.com'].profile == '{profile}'")}}]}}]}}}}));
    }
    items.extend(extra);
    list
}
