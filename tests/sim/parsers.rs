//! Trace and cluster parsers: no panic on any input, and errors that name field and value.

use geometer_testkit::trace as sim_fixtures;

use geometer_sim::cluster::parse_cluster_spec;
use geometer_sim::trace::{alibaba, geometer as trace_format};
use proptest::prelude::*;
use sim_fixtures::a100;

/// Fields that look like what the files hold, and some that do not.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("nan".to_string()),
        Just("1g.10gb*2|3g.40gb".to_string()),
        Just("1g.10gb*".to_string()),
        Just("true".to_string()),
        "-?[0-9]{1,22}(\\.[0-9]{0,4})?",
        "[a-zA-Z0-9|*.=:\" -]{0,12}",
        any::<String>(),
    ]
}

fn table(header: &'static str) -> impl Strategy<Value = String> {
    let width = header.split(',').count();
    prop::collection::vec(prop::collection::vec(field(), width - 1..=width + 1), 0..6).prop_map(move |rows| {
        let mut text = format!("{header}\n");
        for row in rows {
            text.push_str(&row.join(","));
            text.push('\n');
        }
        text
    })
}

const GEOMETER: &str = "name,arrival_s,duration_s,mig,num_gpu,gpu_milli,cpu_milli,memory_mib,priority,gpu_models,nodes,do_not_disrupt";
const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";
const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn geometer_csv_never_panics(text in table(GEOMETER)) {
        let _ = trace_format::parse("t.csv", &text);
    }

    #[test]
    fn geometer_yaml_never_panics(text in any::<String>(), arrival in any::<f64>(), count in any::<u32>()) {
        let _ = trace_format::parse("t.yaml", &text);
        let yaml = format!("pods:\n- name: a\n  arrival_s: {arrival}\n  mig: {{1g.10gb: {count}}}\n");
        let _ = trace_format::parse("t.yaml", &yaml);
    }

    #[test]
    fn alibaba_pods_never_panic(text in table(PODS)) {
        if let Ok(pods) = alibaba::read_pods("p.csv", &text) {
            let _ = alibaba::to_trace("p.csv", &pods, &alibaba::ModelMap::default(), alibaba::Timing::Replay);
        }
    }

    #[test]
    fn alibaba_nodes_never_panic(text in table(NODES)) {
        if let Ok(nodes) = alibaba::read_nodes("n.csv", &text) {
            let map = alibaba::ModelMap::parse("G2=A100-80GB").unwrap();
            let _ = alibaba::cluster_from_nodes(&nodes, &map, |_| Some(a100()));
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = trace_format::parse("t.csv", &text);
        let _ = alibaba::read_pods("p.csv", &text);
        let _ = alibaba::read_nodes("n.csv", &text);
        let _ = parse_cluster_spec(&text, |_| Some(a100()));
        let _ = alibaba::ModelMap::parse(&text);
    }

    #[test]
    fn cluster_specs_never_panic(count in "[0-9x]{0,8}", gpus in "-?[0-9]{0,12}", extra in "[a-z=0-9.:]{0,12}") {
        let _ = parse_cluster_spec(&format!("{count}xA100-80GB:{gpus}{extra}"), |_| Some(a100()));
    }
}

#[test]
fn alibaba_pod_errors_name_line_field_and_value() {
    let text = format!("{PODS}\nopenb-pod-0001,4000,15258,1,470,,BE,Running,100,50,100\n");
    let e = alibaba::read_pods("p.csv", &text).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("\"deletion_time\"") && e.contains("\"50\""), "{e}");
}

#[test]
fn node_list_without_a_mapping_says_what_to_do() {
    let text = format!("{NODES}\nopenb-node-0001,96000,393216,8,G2\n");
    let nodes = alibaba::read_nodes("n.csv", &text).unwrap();
    let e = alibaba::cluster_from_nodes(&nodes, &alibaba::ModelMap::default(), |_| Some(a100()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no GPUs"), "{e}");
    let map = alibaba::ModelMap::parse("G2=A100-80GB").unwrap();
    let (cluster, notes) = alibaba::cluster_from_nodes(&nodes, &map, |_| Some(a100())).unwrap();
    assert_eq!((cluster.gpu_count(), cluster.nodes[0].cpu_milli), (8, Some(96_000)));
    assert!(notes.is_empty());
}
