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

/// The messages of the CEL rules (`x-kubernetes-validations`) in `kind`'s schema.
pub(crate) fn cel_messages(kind: &str) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for rule in
                    map.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten()
                {
                    out.extend(rule["message"].as_str().map(str::to_string));
                }
                map.values().for_each(|child| walk(child, out));
            }
            Value::Array(list) => list.iter().for_each(|child| walk(child, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&schema_of(kind), &mut out);
    out
}

/// What a server does with `object`: the stored object, or why it refused. A status write
/// goes to the existing object of that name, at its current resourceVersion.
async fn write(api: &Api<DynamicObject>, object: &Value, status: bool) -> Result<Value, String> {
    let mut typed: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    let answer = if status {
        let name = object["metadata"]["name"].as_str().unwrap();
        typed.metadata.resource_version = api.get(name).await.unwrap().metadata.resource_version;
        api.replace_status(name, &PostParams::default(), &typed).await
    } else {
        api.create(&PostParams::default(), &typed).await
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
    let real = cp.raw_client(Identity::Admin).await;
    let memory = ApiServer::new();
    for crd in geometer_api::crds() {
        memory.seed(&crd).unwrap();
    }
    let (mut unreadable, mut disagree, mut n) = (Vec::new(), Vec::new(), 0);
    for (kind, example) in examples() {
        let (real_api, memory_api) = (api(&real, kind), api(&memory.client(), kind));
        // The object exists (its status is dropped on create) so that status writes have one.
        write(&real_api, &example, false).await.expect("kube-apiserver takes the example");
        write(&memory_api, &example, false).await.expect("the in-memory server takes the example");
        for field in leaf_fields(&schema_of(kind), &example) {
            for (label, value) in boundary_values(&field) {
                n += 1;
                let mut object = example.clone();
                *at(&mut object, &field.path).unwrap() = value;
                if !field.in_status() {
                    object["metadata"]["name"] = Value::String(format!("b{n}"));
                }
                let on_real = write(&real_api, &object, field.in_status()).await;
                let on_memory = write(&memory_api, &object, field.in_status()).await;
                let case = format!("{kind} {} = {label}", field.dotted());
                if let Ok(stored) = &on_real {
                    if let Err(e) = decodes(kind, stored) {
                        unreadable.push(format!("{case}: {e}"));
                    }
                }
                // The in-memory server runs no CEL rule (README): a refusal by one is expected.
                let by_cel = on_real
                    .as_ref()
                    .err()
                    .is_some_and(|e| cel_messages(kind).iter().any(|m| e.contains(m.as_str())));
                if on_real.is_ok() != on_memory.is_ok() && !(by_cel && on_memory.is_ok()) {
                    let said = |r: &Result<Value, String>| match r {
                        Ok(_) => "stored".to_string(),
                        Err(e) => geometer_api::limits::quote(e),
                    };
                    disagree.push(format!(
                        "{case}: kube-apiserver {}, in-memory {}",
                        said(&on_real),
                        said(&on_memory)
                    ));
                }
            }
        }
    }
    assert!(n > 300, "{n} cases");
    assert!(
        unreadable.is_empty(),
        "stored by kube-apiserver but unreadable to Geometer:\n{}",
        unreadable.join("\n")
    );
    assert!(
        disagree.is_empty(),
        "the in-memory server disagrees with kube-apiserver:\n{}",
        disagree.join("\n")
    );
}
