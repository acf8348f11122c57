//! Every numeric and string field of the three CRDs, set to each boundary value (0, the
//! minimum and maximum, one past each, negative; empty, at the length limit, past it, 1 MiB):
//! the in-memory API server (which validates like the real one: `tests/k8s/crd_bounds.rs`
//! checks the same against kube-apiserver) refuses it, or Geometer reads the object it stored.
//! Nothing the API server stores is unreadable to the controller.

use geometer_apiserver::ApiServer;
use geometer_testkit::crd_bounds::{at, boundary_values, decodes, examples, leaf_fields, schema_of, Field};
use serde_json::Value;

fn fields_of(kind: &str, example: &Value) -> Vec<Field> {
    let fields = leaf_fields(&schema_of(kind), example);
    let mut probe = example.clone();
    let missing: Vec<String> =
        fields.iter().filter(|f| at(&mut probe, &f.path).is_none()).map(Field::dotted).collect();
    assert!(missing.is_empty(), "the {kind} example lacks {missing:?}: add them to crd_bounds::examples");
    fields
}

#[test]
fn every_open_field_has_a_bound() {
    for (kind, example) in examples() {
        for field in fields_of(kind, &example) {
            let s = &field.schema;
            match s["type"].as_str() {
                Some("integer") => assert!(
                    s["minimum"].is_number() && s["maximum"].is_number(),
                    "{kind} {}: an integer without minimum and maximum: {s}",
                    field.dotted()
                ),
                Some("string") => assert!(
                    s["maxLength"].is_number() || s["enum"].is_array(),
                    "{kind} {}: a string without maxLength: {s}",
                    field.dotted()
                ),
                _ => {}
            }
        }
    }
}

#[test]
fn every_boundary_value_is_refused_or_read() {
    let server = ApiServer::new();
    for crd in geometer_api::crds() {
        server.seed(&crd).unwrap();
    }
    let mut refused = 0;
    let mut n = 0;
    for (kind, example) in examples() {
        decodes(kind, &example).unwrap_or_else(|e| panic!("the {kind} example does not read: {e}"));
        server.seed_value(example.clone()).unwrap_or_else(|e| panic!("the {kind} example is refused: {e}"));
        for field in fields_of(kind, &example) {
            for (label, value) in boundary_values(&field) {
                n += 1;
                let mut object = example.clone();
                object["metadata"]["name"] = Value::String(format!("b{n}"));
                *at(&mut object, &field.path).unwrap() = value;
                match server.seed_value(object) {
                    Err(e) => {
                        // Refused as kube-apiserver refuses it: 422 Invalid, naming the object
                        // and the field.
                        let what = format!("{kind} {} = {label}", field.dotted());
                        assert_eq!((e.code, e.reason), (422, "Invalid"), "{what}: {e}");
                        assert!(e.message.contains(&format!("\"b{n}\" is invalid")), "{what}: {e}");
                        let name = field.path.iter().rev().find(|p| p.parse::<usize>().is_err()).unwrap();
                        assert!(e.message.contains(name.as_str()), "{what}: {e}");
                        refused += 1;
                    }
                    Ok(stored) => {
                        if let Err(e) = decodes(kind, &stored) {
                            panic!(
                                "{kind} {} = {label}: stored by the API server but unreadable: {e}",
                                field.dotted()
                            );
                        }
                    }
                }
            }
        }
    }
    // The bounds do refuse things: every integer past its maximum and string past its limit.
    assert!(refused > n / 3, "only {refused} of {n} boundary values refused");
}
