//! The workloads of a [`RealCluster`]: its pods, Deployments and Jobs, created, scaled and
//! read, and what the operator made of them (plans, evictions, events, GPU geometries).

use geometer_api::{MigNode, MigNodePhase, MigPlan};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::json;

use super::{RealCluster, NS};

impl RealCluster {
    pub async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.admin.clone(), NS).list(&ListParams::default()).await.expect("pods").items
    }

    /// Pods of the namespace that are Running, by name.
    pub async fn running(&self) -> Vec<String> {
        let pods = self.pods().await;
        pods.into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| p.metadata.name)
            .collect()
    }

    /// The pods of Deployment `app` (label `app=<app>`) that are not terminating.
    pub async fn pods_of(&self, app: &str) -> Vec<Pod> {
        let params = ListParams::default().labels(&format!("app={app}"));
        let pods = Api::<Pod>::namespaced(self.admin.clone(), NS).list(&params).await.expect("pods").items;
        pods.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
    }

    /// The Running pods of Deployment `app`, as (name, uid, node).
    pub async fn running_of(&self, app: &str) -> Vec<(String, String, String)> {
        self.pods_of(app)
            .await
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .map(|p| {
                let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
                (p.metadata.name.unwrap_or_default(), p.metadata.uid.unwrap_or_default(), node)
            })
            .collect()
    }

    /// The Running pods of Deployment `app`, each with the resources its containers' limits name.
    pub async fn running_limits(&self, app: &str) -> Vec<(String, Vec<String>)> {
        self.pods_of(app)
            .await
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), limits(&p)))
            .collect()
    }

    /// What the agents measured of the whole GPUs pods hold (`MigNode.status.usage`); empty
    /// when the MigNodes cannot be listed.
    pub async fn usage(&self) -> Vec<geometer_api::PodGpuUsage> {
        let nodes = Api::<MigNode>::all(self.admin.clone()).list(&ListParams::default()).await;
        nodes.map(|l| l.items.iter().flat_map(|n| n.usage().to_vec()).collect()).unwrap_or_default()
    }

    /// Sets Deployment `app`'s replicas.
    pub async fn scale(&self, app: &str, replicas: i32) {
        let patch = json!({"spec": {"replicas": replicas}});
        Api::<Deployment>::namespaced(self.admin.clone(), NS)
            .patch(app, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .expect("scale");
    }

    /// `namespace/name` of pods the simulated kubelets run on a device NVML no longer has.
    pub fn pods_without_devices(&self) -> Vec<geometer_solver::PodKey> {
        let nodes = self.sim.node_names();
        nodes.iter().flat_map(|n| self.sim.node(n).unwrap().pods_without_devices()).collect()
    }

    /// Deletes Deployment `app` and waits until its pods are gone.
    pub async fn delete_deployment(&self, app: &str) {
        let params = kube::api::DeleteParams::foreground();
        Api::<Deployment>::namespaced(self.admin.clone(), NS).delete(app, &params).await.expect("delete");
        crate::wait::wait_until(
            &format!("the pods of {app} gone"),
            || async { self.pods_of(app).await.is_empty().then_some(()) },
            || self.logs(),
        )
        .await;
    }

    /// Notes of the events about pod `name` in [`NS`] with `reason`.
    pub async fn event_notes(&self, pod: &str, reason: &str) -> Vec<String> {
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(self.admin.clone(), NS);
        let list = events.list(&ListParams::default()).await.expect("events").items;
        list.into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| e.note.unwrap_or_default())
            .collect()
    }

    /// Evictions of workload pods (namespace [`NS`]) the API server granted, by pod name.
    pub fn evicted(&self) -> Vec<String> {
        self.cp.evictions().into_iter().filter(|e| e.namespace == NS && e.granted()).map(|e| e.pod).collect()
    }

    /// Waits until a plan is `Succeeded` (pods may run before the controller has seen every
    /// node finish) and returns it.
    pub async fn succeeded_plan(&self) -> MigPlan {
        crate::wait::wait_until(
            "a plan Succeeded",
            || async {
                self.plans().await.into_iter().find(|p| p.phase() == geometer_api::MigPlanPhase::Succeeded)
            },
            || self.logs(),
        )
        .await
    }

    pub async fn plans(&self) -> Vec<MigPlan> {
        Api::<MigPlan>::all(self.admin.clone()).list(&ListParams::default()).await.expect("plans").items
    }

    pub async fn nodes(&self) -> Vec<Node> {
        Api::<Node>::all(self.admin.clone()).list(&ListParams::default()).await.expect("nodes").items
    }

    /// Every node's MigNode Ready for its latest spec, no node cordoned.
    pub async fn settled(&self) -> bool {
        let mignodes =
            Api::<MigNode>::all(self.admin.clone()).list(&ListParams::default()).await.expect("mignodes");
        let ready = mignodes.items.len() == self.sim.node_names().len()
            && mignodes.items.iter().all(|m| {
                m.status.as_ref().is_some_and(|s| {
                    s.phase == MigNodePhase::Ready
                        && s.observed_generation == m.metadata.generation
                        && !s.cordoned_by_geometer
                })
            });
        ready
            && self
                .nodes()
                .await
                .iter()
                .all(|n| !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false))
    }

    /// (kind, manager, subresource) of every managedFields entry of the MigNodes and MigPlans.
    pub async fn field_managers(&self) -> Vec<(String, String, String)> {
        let mignodes =
            Api::<MigNode>::all(self.admin.clone()).list(&ListParams::default()).await.expect("mignodes");
        let plans = self.plans().await;
        let entries =
            |kind: &str, fields: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>| {
                fields
                    .into_iter()
                    .map(|f| {
                        (kind.to_string(), f.manager.unwrap_or_default(), f.subresource.unwrap_or_default())
                    })
                    .collect::<Vec<_>>()
            };
        let mut out: Vec<(String, String, String)> = Vec::new();
        for m in mignodes.items {
            out.extend(entries("MigNode", m.metadata.managed_fields.unwrap_or_default()));
        }
        for p in plans {
            out.extend(entries("MigPlan", p.metadata.managed_fields.unwrap_or_default()));
        }
        out.sort();
        out.dedup();
        out
    }

    /// GPUs with MIG mode off, over every node.
    pub fn whole_gpus(&self) -> usize {
        self.sim.whole_gpus()
    }

    /// Instances on a simulated GPU as `profile@start`, sorted.
    pub fn geometry(&self, node: &str, gpu: u32) -> Vec<String> {
        let mut g: Vec<String> =
            self.sim.nvml(node).unwrap().geometry(gpu).unwrap().iter().map(|p| p.to_string()).collect();
        g.sort();
        g
    }

    /// Creates a Job in [`NS`] of `completions` pods, all at once, whose pods are `template`
    /// (their run time, `MigPod::run_seconds`, is how long each takes).
    pub async fn run_job(&self, name: &str, completions: i32, template: Pod) -> Job {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "completions": completions,
                "parallelism": completions,
                "backoffLimit": 0,
                "template": pod_template(name, template),
            },
        }))
        .unwrap();
        Api::<Job>::namespaced(self.admin.clone(), NS)
            .create(&PostParams::default(), &job)
            .await
            .expect("job")
    }

    /// The Job's condition of `type_` is True.
    pub async fn job_condition(&self, name: &str, type_: &str) -> bool {
        let job = Api::<Job>::namespaced(self.admin.clone(), NS).get(name).await.expect("job");
        let conditions = job.status.and_then(|s| s.conditions).unwrap_or_default();
        conditions.iter().any(|c| c.type_ == type_ && c.status == "True")
    }

    /// Creates a Deployment in [`NS`] whose pods are `template` (its name becomes the app label).
    pub async fn deploy(&self, name: &str, replicas: i32, template: Pod) -> Deployment {
        let mut template = pod_template(name, template);
        template["spec"]["restartPolicy"] = json!("Always");
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": template,
            },
        }))
        .unwrap();
        Api::<Deployment>::namespaced(self.admin.clone(), NS)
            .create(&PostParams::default(), &deployment)
            .await
            .expect("deployment")
    }
}

/// A workload's pod template from `template`: its labels with `app: name`, its annotations
/// and spec.
fn pod_template(name: &str, template: Pod) -> serde_json::Value {
    let mut labels = template.metadata.labels.unwrap_or_default();
    labels.insert("app".into(), name.into());
    json!({
        "metadata": {"labels": labels, "annotations": template.metadata.annotations},
        "spec": template.spec.expect("pod spec"),
    })
}

/// The resources the containers of `pod` name in their limits.
pub fn limits(pod: &Pod) -> Vec<String> {
    let containers = pod.spec.iter().flat_map(|s| &s.containers);
    containers
        .flat_map(|c| c.resources.iter().flat_map(|r| r.limits.iter().flat_map(|l| l.keys().cloned())))
        .collect()
}
