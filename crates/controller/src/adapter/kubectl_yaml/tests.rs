use proptest::prelude::*;
use serde_json::{json, Value};

use super::{item_json, split_list};

/// The List's items as the general parser reads the whole text.
fn general(text: &str) -> Result<Vec<Value>, String> {
    let list: Value = geometer_solver::yaml::from_str(text).map_err(|e| e.0)?;
    Ok(match list.get("items") {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    })
}

/// The List's items as read here: each item fast, or by the general parser where this
/// reader leaves it; and how many were read fast.
fn fast(text: &str) -> Option<(Vec<Value>, usize)> {
    let list = split_list(text)?;
    let mut fast = 0;
    let mut items = Vec::new();
    for item in list.items {
        match item_json(item) {
            Some(json) => {
                fast += 1;
                items.push(serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}")));
            }
            None => items.push(geometer_solver::yaml::from_str::<Vec<Value>>(item).ok()?.remove(0)),
        }
    }
    Some((items, fast))
}

/// What `kubectl get nodes,pods -o yaml` prints (go-yaml's style: sequences at their key's
/// indent, quoted timestamps and numbers-as-strings, literal blocks for multi-line strings).
const KUBECTL: &str = r#"apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"v1","kind":"Node","metadata":{"name":"gpu-1"}}
      note: 'it''s a node: the first'
    creationTimestamp: "2026-12-01T10:00:00Z"
    labels:
      nvidia.com/gpu.count: "8"
      nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
      nvidia.com/mig.config: all-1g.10gb
      topology.kubernetes.io/zone: eu-west-1a
    name: gpu-1
    resourceVersion: "1234"
    uid: 00000001-0000-4000-8000-000000000001
  spec:
    taints:
    - effect: NoSchedule
      key: nvidia.com/gpu
      value: present
  status:
    allocatable:
      cpu: 190500m
      memory: 2063091660Ki
      nvidia.com/mig-1g.10gb: "56"
    capacity:
      nvidia.com/mig-1g.10gb: "56"
    conditions:
    - lastHeartbeatTime: "2026-12-01T10:00:00Z"
      message: kubelet is posting ready status
      reason: KubeletReady
      status: "True"
      type: Ready
    images:
    - names:
      - nvcr.io/nvidia/cuda@sha256:0123456789abcdef
      - nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04
      sizeBytes: 123456789
# a comment between items
- apiVersion: v1
  kind: Pod
  metadata:
    labels: {}
    name: train-0
    namespace: ml
  spec:
    containers:
    - args:
      - --epochs=3
      - "--name=a \"quoted\" word\tand \u00e9"
      command:
      - python
      env:
      - name: EMPTY
        value: ""
      - name: NULLED
        value: null
      - name: TILDE
        value: ~
      image: nvcr.io/nvidia/pytorch:24.01-py3
      name: main
      ports:
      - containerPort: 8080
        protocol: TCP
      resources:
        limits:
          nvidia.com/mig-1g.10gb: "1"
        requests:
          cpu: "2"
          memory: 8Gi
      securityContext:
        privileged: false
        runAsUser: 0
    dnsPolicy: ClusterFirst
    nodeSelector:
      "1": one
    script: |-
      #!/bin/sh
      echo "hi"   # not a comment

      exit 0
    folded: >-
      a long line that was
      folded in two

      and a paragraph
    kept: |+
      last

    tolerations:
    - effect: NoSchedule
      key: nvidia.com/gpu
      operator: Exists
  status:
    phase: Pending
    podIP: 10.244.1.5
    startTime:
- apiVersion: v1
  kind: Pod
  metadata: # a comment after a key
    name: "train-1"   # and after a value
    namespace: ml
kind: List
metadata:
  resourceVersion: ""
"#;

#[test]
fn kubectl_yaml_reads_fast_as_the_general_parser_reads_it() {
    let (items, fast_count) = fast(KUBECTL).expect("a kubectl List splits");
    assert_eq!(items, general(KUBECTL).unwrap());
    assert_eq!(fast_count, 3, "every item of kubectl's YAML reads fast");
    let pod = &items[1]["spec"];
    assert_eq!(pod["script"], json!("#!/bin/sh\necho \"hi\"   # not a comment\n\nexit 0"));
    assert_eq!(pod["folded"], json!("a long line that was folded in two\nand a paragraph"));
    assert_eq!(pod["kept"], json!("last\n\n"));
    assert_eq!(pod["containers"][0]["ports"][0]["containerPort"], json!(8080));
    assert_eq!(items[1]["status"]["startTime"], Value::Null);
    assert_eq!(items[0]["metadata"]["annotations"]["note"], json!("it's a node: the first"));
    assert_eq!(split_list(KUBECTL).unwrap().kind, "List");
}

#[test]
fn long_scalars_folded_over_lines_read_fast() {
    let text = "kind: List\nitems:\n- message: '0/8 nodes are available: 8 Insufficient\n    nvidia.com/mig-1g.10gb.  ''preemption'': not\n\n    helpful'\n  note: \"a \\\"quoted\\\" \\u00e9   \n    scalar\"\n  plain: a plain scalar\n    that goes on\n\n\n    after two blank lines\n  args:\n  - a long argument\n    folded\n";
    let (items, read_fast) = fast(text).unwrap();
    assert_eq!((items.clone(), read_fast), (general(text).unwrap(), 1));
    assert_eq!(
        items[0],
        json!({
            "message": "0/8 nodes are available: 8 Insufficient nvidia.com/mig-1g.10gb.  'preemption': not\nhelpful",
            "note": "a \"quoted\" \u{e9} scalar",
            "plain": "a plain scalar that goes on\n\nafter two blank lines",
            "args": ["a long argument folded"],
        })
    );
}

#[test]
fn sequences_indented_under_items_and_empty_lists_split() {
    let indented = "kind: PodList\nitems:\n  - metadata:\n      name: a\n  - metadata:\n      name: b\n";
    let (items, fast_count) = fast(indented).unwrap();
    assert_eq!((items.clone(), fast_count), (general(indented).unwrap(), 2));
    assert_eq!(split_list(indented).unwrap().kind, "PodList");
    for empty in ["kind: List\nitems: []\n", "kind: List\nitems:\nmetadata: {}\n"] {
        assert_eq!(fast(empty).unwrap(), (Vec::new(), 0), "{empty}");
    }
}

#[test]
fn what_the_reader_does_not_know_in_an_item_is_left_to_the_general_parser() {
    let items = [
        "- kind: Pod\n  metadata: {name: flow}\n",
        "- kind: Pod\n  metadata: &m\n    name: anchored\n  copy: *m\n",
        "- kind: Pod\n  weight: 1.5\n",
        "- kind: Pod\n  answer: yes\n",
        "- kind: Pod\n  escaped: \"a break \\\n    escaped\"\n",
        "- kind: Pod\n  long: a plain scalar # and a comment\n    that goes on\n",
        "- kind: Pod\n  long: a plain scalar\n    that: looks like a key\n",
        "- kind: Pod\n  tagged: !!str 12\n",
        "- kind: Pod\n  octal: 0755\n",
        "- kind: Pod\n  indicator: |2\n      two more\n",
        "- kind: Pod\n  same: 1\n  same: 2\n",
        "- kind: Pod\n  tab:\there\n",
        "- - nested\n",
    ];
    for item in items {
        assert_eq!(item_json(item), None, "{item}");
        let text = format!("kind: List\nitems:\n{item}");
        match general(&text) {
            Ok(whole) => assert_eq!(fast(&text).map(|(items, _)| items), Some(whole), "{item}"),
            Err(_) => assert_eq!(fast(&text), None, "{item}: the whole text says why"),
        }
    }
}

#[test]
fn a_long_mapping_with_unsorted_keys_is_left_to_the_general_parser() {
    let mapping = |keys: &mut dyn Iterator<Item = usize>| {
        let entries: String = keys.map(|k| format!("  k{k:03}: {k}\n")).collect();
        format!("- kind: Pod\n{entries}")
    };
    let sorted = mapping(&mut (0..100));
    let unsorted = mapping(&mut (0..100).rev());
    let short_unsorted = mapping(&mut (0..20).rev());
    assert!(item_json(&sorted).is_some() && item_json(&short_unsorted).is_some());
    assert_eq!(item_json(&unsorted), None);
    let text = format!("kind: List\nitems:\n{unsorted}");
    assert_eq!(fast(&text).map(|(items, _)| items), Some(general(&text).unwrap()));
}

#[test]
fn a_list_not_in_kubectls_shape_is_left_whole() {
    let texts = [
        // `items` twice, a key a List has not, a second document, a stream marker.
        "kind: List\nitems:\n- a: 1\nitems:\n- b: 2\n",
        "kind: List\nextra: 1\nitems:\n- a: 1\n",
        "kind: List\nitems:\n- a: 1\n---\nkind: List\n",
        "---\nkind: List\nitems:\n- a: 1\n",
        // Not a List, or items that are not a block sequence.
        "kind: Pod\nitems:\n- a: 1\n",
        "kind: List\nitems:\n  a: 1\n",
        "kind: List\nitems: [{a: 1}]\n",
        "kind: List\r\nitems:\r\n- a: 1\r\n",
    ];
    for text in texts {
        assert!(split_list(text).is_none(), "{text}");
    }
}

#[test]
fn yaml_only_the_whole_text_explains_is_read_whole() {
    // An alias to another item's anchor; a quoted scalar left open across items.
    let alias = "kind: List\nitems:\n- metadata: &m\n    name: a\n- metadata: *m\n";
    let list = split_list(alias).unwrap();
    assert!(item_json(list.items[1]).is_none());
    assert!(geometer_solver::yaml::from_str::<Vec<Value>>(list.items[1]).is_err());
    assert_eq!(fast(alias), None);
    let open = "kind: List\nitems:\n- metadata:\n    name: \"a\n- b\"\n";
    assert_eq!(fast(open), None);
}

/// Strings a Kubernetes object holds, and strings that look like something else.
fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        prop::sample::select(vec![
            "true",
            "True",
            "false",
            "null",
            "~",
            "yes",
            "No",
            "on",
            "0",
            "-1",
            "007",
            "1.5",
            "1e3",
            "0x1F",
            ".inf",
            "-.inf",
            "+1",
            "1_000",
            "12:30",
            "2026-11-01",
            "00000001-0000-4000-8000-000000000001",
            "-foo",
            "1-2",
            "0b101",
            "0o17",
            "1e",
            "1E+3",
            "10.244.1.5",
            "1.2.3",
            "500m",
            "8Gi",
            "- a",
            "a: b",
            "a #b",
            "#a",
            "@a",
            "`a",
            "'a'",
            "\"a\"",
            "a\\b",
            " lead",
            "trail ",
            "1g.10gb",
            "nvidia.com/mig-1g.10gb",
            "é ü 中",
            "a\tb",
            "line\n",
            "two\nlines",
            "\n\nbreaks\n\n",
            "  indented\nnot",
            "a\n  b\nc",
            "{}",
            "[]",
            "{a}",
            "*a",
            "&a",
            "!a",
            "|",
            ">",
            "? a",
            "key:",
            "-",
            "--",
            "---",
            "...",
            "%a",
            "=",
            "<<",
        ])
        .prop_map(str::to_string),
        "[ -~]{0,12}",
        "[a-z ]{60,140}",
        "([a-z]{1,8} ){2,12}\n([a-z]{1,8} ){2,12}",
        "[ -~\n\u{e9}\u{85}\u{2028}]{0,40}",
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        string().prop_map(Value::String),
        any::<i32>().prop_map(|n| json!(n)),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(string(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any List serde-saphyr writes reads here as the general parser reads it.
    #[test]
    fn any_list_reads_as_the_general_parser_reads_it(items in prop::collection::vec(value(), 0..6)) {
        let items: Vec<Value> = items.into_iter().map(|v| json!({"kind": "Pod", "spec": v})).collect();
        let text = serde_saphyr::to_string(&json!({"apiVersion": "v1", "items": items, "kind": "List"})).unwrap();
        let whole = general(&text).unwrap();
        if let Some((read, _)) = fast(&text) {
            prop_assert_eq!(read, whole, "{}", text);
        }
    }
}

#[test]
fn most_generated_items_read_fast() {
    // The property above holds also when every item is left to the general parser: count.
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut total, mut read_fast) = (0, 0);
    for _ in 0..300 {
        let spec = value().new_tree(&mut runner).unwrap().current();
        let text =
            serde_saphyr::to_string(&json!({"kind": "List", "items": [{"kind": "Pod", "spec": spec}]}))
                .unwrap();
        total += 1;
        read_fast += fast(&text).map_or(0, |(_, n)| n);
    }
    assert!(read_fast * 10 >= total * 8, "{read_fast} of {total} read fast");
}

/// go-yaml's own output (what kubectl prints), regenerated by `scripts/kubectl-yaml-fixture.sh`:
/// 300 Pods with awkward strings, folded, quoted, literal, look-alikes of other types.
const GO_YAML: &str = include_str!("../../../../../tests/fixtures/kubectl-yaml/go-yaml-awkward.yaml");

#[test]
fn go_yaml_reads_as_the_general_parser_reads_it_item_by_item() {
    let whole = general(GO_YAML).unwrap();
    assert_eq!(whole.len(), 300);
    let (items, read_fast) = fast(GO_YAML).expect("go-yaml's List splits");
    for (index, (item, expected)) in items.iter().zip(&whole).enumerate() {
        assert_eq!(item, expected, "items[{index}]");
    }
    // The rest hold what go-yaml writes for the awkward keys and nesting the generator makes
    // on purpose (`? ` complex keys, `- - -`, `|2` indentation indicators): left whole.
    assert!(read_fast >= 200, "{read_fast} of 300 read fast");
}

/// An edit of a text: a byte inserted, a byte removed, a line repeated or its indent changed.
#[derive(Debug, Clone)]
enum Edit {
    Insert(usize, u8),
    Remove(usize),
    RepeatLine(usize),
    Indent(usize, bool),
}

fn edit() -> impl Strategy<Value = Edit> {
    let byte = prop::sample::select(b" -:#\"'|>\n&*{[a1\t\\!?".to_vec());
    prop_oneof![
        (any::<usize>(), byte).prop_map(|(at, b)| Edit::Insert(at, b)),
        any::<usize>().prop_map(Edit::Remove),
        any::<usize>().prop_map(Edit::RepeatLine),
        (any::<usize>(), any::<bool>()).prop_map(|(at, more)| Edit::Indent(at, more)),
    ]
}

fn edited(text: &str, edits: &[Edit]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for edit in edits {
        let line_start =
            |at: usize, bytes: &[u8]| bytes[..at].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        match *edit {
            Edit::Insert(at, b) => bytes.insert(at % (bytes.len() + 1), b),
            Edit::Remove(at) if !bytes.is_empty() => {
                bytes.remove(at % bytes.len());
            }
            Edit::RepeatLine(at) if !bytes.is_empty() => {
                let start = line_start(at % bytes.len(), &bytes);
                let end =
                    bytes[start..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| start + i + 1);
                let line = bytes[start..end].to_vec();
                bytes.splice(start..start, line);
            }
            Edit::Indent(at, more) if !bytes.is_empty() => {
                let start = line_start(at % bytes.len(), &bytes);
                if more {
                    bytes.insert(start, b' ');
                } else if bytes.get(start) == Some(&b' ') {
                    bytes.remove(start);
                }
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// kubectl's YAML broken in small ways: what the general parser refuses, this reader never
    /// accepts (the whole text is then read, to say why), and what it reads, it reads alike.
    #[test]
    fn edited_kubectl_yaml_reads_as_the_general_parser_reads_it(edits in prop::collection::vec(edit(), 1..4)) {
        let text = edited(KUBECTL, &edits);
        match (general(&text), fast(&text)) {
            (Ok(whole), Some((items, _))) => prop_assert_eq!(items, whole, "{}", text),
            (Err(e), Some(_)) => prop_assert!(false, "the general parser refuses it ({}), this reader read it:\n{}", e, text),
            (_, None) => {}
        }
    }
}
