//! `geometer plan` on a kubectl List from a DynamicMIG node (NVIDIA's DRA driver makes each
//! instance as a claim is prepared): it says which pending claims fragmentation blocks and
//! which capacity does, what moving pods would open (where a policy turns compaction on), and
//! changes nothing on the node.

use crate::plan::{example, notes, plan_json};

#[test]
fn a_fragmented_dynamic_mig_gpu_is_reported_and_left_alone() {
    let plan = plan_json(&["--snapshot", &example("dra-dynamic-mig.yaml")]);
    assert!(
        plan["gpus"].as_array().unwrap().iter().all(|g| g["node"] != "dyn-1" || g["changed"] == false),
        "no instance change on a DynamicMIG node: {}",
        plan["gpus"]
    );
    let notes = notes(&plan);
    let said = |words: &[&str]| notes.iter().any(|n| words.iter().all(|w| n.contains(w)));
    assert!(
        said(&[
            "node dyn-1 gpu-0-counter-set",
            "1g.10gb@0, 1g.10gb@1, 1g.10gb@5",
            "free memory slices 2-4, 6-7"
        ]),
        "{notes:?}"
    );
    assert!(
        said(&["pod ml/train-0 needs 3g.40gb", "blocked by fragmentation", "node dyn-1", "1 moved"]),
        "{notes:?}"
    );
    // What compaction would move, and what it would open.
    assert!(said(&["moving ml/chat-2 (on gpu-0-mig-1g10gb-5) would open gpu-0-mig-3g40gb-4"]), "{notes:?}");
    assert!(said(&["pod ml/big-0 needs 7g.80gb", "blocked by capacity"]), "{notes:?}");
    assert!(!said(&["ml/small-0 needs"]), "a 1g.10gb fits now; the scheduler will allocate it: {notes:?}");
    assert!(said(&["dyn-1", "DynamicMIG", "never changes"]), "{notes:?}");
}
