//! The CRD bounds against the real kube-apiserver: every numeric and string field of the three
//! CRDs set to each boundary value (see `tests/api/crd_bounds.rs`, which runs the same on the
//! in-memory server). What the real server stores, Geometer reads; and the in-memory server
//! refuses exactly what the real one refuses, so the faster tests stand for it.

use geometer_apiserver::ApiServer;
use geometer_testkit::control_plane::{start_or_skip, Identity};
use geometer_testkit::crd_bounds::{at, boundary_values, decodes, examples, leaf_fields, schema_of};
use geometer_testkit::real_cluster::install;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;

fn api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let plural = match kind {
        "MigPolicy" => "migpolicies",
        "MigPlan" => "migplans",
        _ => "mignodes",
    };
    let gvk = GroupVersionKind::gvk("geometer.dev", "v1alpha1", kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, plural))
}

/// What the real server does with `object`: the stored object, or why it refused.
async fn real_write(api: &Api<DynamicObject>, object: &Value, status: bool) -> Result<Value, String> {
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let answer = if status {
        let name = object["metadata"]["name"].as_str().unwrap();
        api.replace_status(name, &dry_run, serde_json::to_vec(object).unwrap()).await
    } else {
        api.create(&dry_run, &serde_json::from_value(object.clone()).unwrap()).await
    };
    match answer {
        Ok(stored) => Ok(serde_json::to_value(stored).unwrap()),
        Err(kube::Error::Api(e)) => Err(format!("{} {}", e.code, e.message)),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_refuses_or_geometer_reads_every_boundary_value() {
    let Some(cp) = start_or_skip("crd-bounds").await else { return };
    install(&cp);
    let client = cp.raw_client(Identity::Admin).await;
    let memory = ApiServer::new();
    for crd in geometer_api::crds() {
        memory.seed(&crd).unwrap();
    }
    let (mut unreadable, mut disagree, mut n) = (Vec::new(), Vec::new(), 0);
    for (kind, example) in examples() {
        let api = api(&client, kind);
        // The object exists (its status is dropped on create) so that status writes have one.
        let created = api.create(&PostParams::default(), &serde_json::from_value(example.clone()).unwrap()).await;
        let resource_version = created.expect("kube-apiserver takes the example").metadata.resource_version;
        for field in leaf_fields(&schema_of(kind), &example) {
            for (label, value) in boundary_values(&field) {
                n += 1;
                let mut object = example.clone();
                *at(&mut object, &field.path).unwrap() = value;
                if field.in_status() {
                    object["metadata"]["resourceVersion"] = serde_json::json!(resource_version);
                }
                let real = real_write(&api, &object, field.in_status()).await;
                let mut in_memory = object.clone();
                in_memory["metadata"]["name"] = Value::String(format!("b{n}"));
                in_memory["metadata"].as_object_mut().unwrap().remove("resourceVersion");
                let memory_accepts = memory.seed_value(in_memory).is_ok();
                let case = format!("{kind} {} = {label}", field.dotted());
                if let Ok(stored) = &real {
                    if let Err(e) = decodes(kind, stored) {
                        unreadable.push(format!("{case}: {e}"));
                    }
                }
                if real.is_ok() != memory_accepts {
                    disagree.push(format!("{case}: kube-apiserver {real:?}, in-memory accepts: {memory_accepts}"));
                }
            }
        }
    }
    assert!(n > 300, "{n} cases");
    assert!(unreadable.is_empty(), "stored by kube-apiserver but unreadable to Geometer:\n{}", unreadable.join("\n"));
    assert!(disagree.is_empty(), "the in-memory server disagrees with kube-apiserver:\n{}", disagree.join("\n"));
}
