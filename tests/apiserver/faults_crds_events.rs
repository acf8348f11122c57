//! Injected faults with clear errors, CRDs created at run time (schema rules served), and
//! recorder events stored as core events.

use crate::objects::{api_code, node, running_pod};
use geometer_apiserver::{ApiServer, Fault, Verb};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

#[tokio::test]
async fn injected_faults_and_clear_errors() {
    let server = ApiServer::new();
    let nodes: Api<Node> = Api::all(server.client());
    nodes.create(&PostParams::default(), &node("n")).await.unwrap();
    server.faults().inject(Fault::error(500).verb(Verb::Get).resource("nodes").name("n").times(2));
    server.faults().inject(Fault::error(429).verb(Verb::Create).resource("pods/eviction").times(1));
    assert_eq!(api_code(nodes.get("n").await.unwrap_err()), 500);
    assert_eq!(api_code(nodes.get("n").await.unwrap_err()), 500);
    assert!(nodes.get("n").await.is_ok(), "the fault ran out");
    assert!(nodes.list(&ListParams::default()).await.is_ok(), "list is not a get");
    server.seed(&running_pod("p", "n", json!({}), true)).unwrap();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    assert_eq!(api_code(pods.evict("p", &EvictParams::default()).await.unwrap_err()), 429);
    pods.evict("p", &EvictParams::default()).await.unwrap();
    assert_eq!(server.faults().hits(), 3);

    server.faults().inject(Fault::delay(std::time::Duration::from_millis(1)).resource("nodes").times(1));
    assert!(nodes.get("n").await.is_ok(), "a delay still answers");

    // What the server does not serve is a Status, never a crash.
    let gvk = GroupVersionKind::gvk("apps", "v1", "Deployment");
    let deployments: Api<DynamicObject> = Api::all_with(server.client(), &ApiResource::from_gvk(&gvk));
    assert_eq!(api_code(deployments.list(&ListParams::default()).await.unwrap_err()), 404);
    let pods_status =
        pods.patch_status("nope", &PatchParams::default(), &Patch::Strategic(json!({}))).await.unwrap_err();
    assert_eq!(api_code(pods_status), 404);
    let requests = server.requests();
    assert!(requests.iter().any(|r| r.resource.as_deref() == Some("pods/eviction") && r.status == 429));
}

const MIGPLAN_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.dev}
spec:
  group: example.dev
  scope: Cluster
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Phase, type: string, jsonPath: .status.phase}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              mode: {type: string, default: DryRun, enum: [DryRun, Auto]}
          status:
            type: object
            properties:
              phase: {type: string}
"#;

#[tokio::test]
async fn crd_created_at_run_time_is_served_with_schema_rules() {
    let server = ApiServer::new();
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    let crd: CustomResourceDefinition = serde_saphyr::from_str(MIGPLAN_CRD).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let established = crds.get("widgets.example.dev").await.unwrap();
    let conditions = established.status.unwrap().conditions.unwrap();
    assert!(conditions.iter().any(|c| c.type_ == "Established" && c.status == "True"));

    let gvk = GroupVersionKind::gvk("example.dev", "v1", "Widget");
    let widgets: Api<DynamicObject> = Api::all_with(server.client(), &ApiResource::from_gvk(&gvk));
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.dev/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 3, "unknown": true}, "status": {"phase": "Ignored"}}))
    .unwrap();
    let created = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.data["spec"], json!({"size": 3, "mode": "DryRun"}), "defaulted and pruned");
    assert!(created.data.get("status").is_none(), "create ignores status when status is a subresource");

    let bad: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.dev/v1", "kind": "Widget",
        "metadata": {"name": "w2"}, "spec": {"size": 0, "mode": "Sometimes"}}))
    .unwrap();
    match widgets.create(&PostParams::default(), &bad).await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert!(s.message.contains("spec.size") && s.message.contains("spec.mode"), "{}", s.message);
        }
        other => panic!("{other:?}"),
    }
    let smp = widgets
        .patch("w1", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"size": 4}})))
        .await
        .unwrap_err();
    assert_eq!(api_code(smp), 415, "strategic merge patch is for built-in types only");
    let status = widgets
        .patch_status("w1", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Ready"}})))
        .await
        .unwrap();
    assert_eq!(status.data["status"]["phase"], "Ready");

    // Deleting the CRD takes its objects and its endpoint with it.
    crds.delete("widgets.example.dev", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(widgets.list(&ListParams::default()).await.unwrap_err()), 404);
}

#[tokio::test]
async fn recorder_events_show_up_as_core_events() {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let server = ApiServer::new();
    let node = server.seed(&node("gpu-1")).unwrap();
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    };
    let recorder = Recorder::new(
        server.client(),
        Reporter { controller: "geometer-agent".into(), instance: Some("gpu-1".into()) },
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "Repartitioned".into(),
        note: Some("3 x 2g.20gb".into()),
        action: "Reconfigure".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();

    // kubectl describe node lists core events by the involved object.
    let core: Api<CoreEvent> = Api::all(server.client());
    let selector = format!(
        "involvedObject.kind=Node,involvedObject.name=gpu-1,involvedObject.uid={}",
        node.metadata.uid.unwrap()
    );
    let found = core.list(&ListParams::default().fields(&selector)).await.unwrap().items;
    assert_eq!(found.len(), 1, "the repeat updates the same event");
    assert_eq!(found[0].message.as_deref(), Some("3 x 2g.20gb"));
    assert_eq!(found[0].reporting_component.as_deref(), Some("geometer-agent"));
    assert_eq!(found[0].series.as_ref().and_then(|s| s.count), Some(2));
}
