//! `geometer plan`: plan MIG geometry offline from a cluster snapshot, read-only.
//!
//! `kubectl get nodes,pods -A -o yaml | geometer plan --snapshot -` plans against a real
//! cluster without touching it.

use std::time::Duration;

use anyhow::Context;
use geometer_solver::catalog::Catalog;
use geometer_solver::plan::PlanOptions;
use geometer_solver::snapshot::Snapshot;
use serde_json::Value;

use super::args::PlanArgs;
use crate::cli::cluster::read_input;
use crate::cli::output::{self, Failure};
use geometer_controller::adapter;

/// A planner snapshot has `nodes` and no `kind`; anything else goes through the adapter.
fn is_planner_snapshot(value: &Value) -> bool {
    value.get("kind").is_none() && value.get("nodes").is_some()
}

/// Plans the snapshot file `snapshot`.
pub(super) fn run(args: &PlanArgs, catalog: Catalog, snapshot: &str) -> Result<(), Failure> {
    let bad = |e: anyhow::Error| Failure::bad_input(e);
    let policy = match &args.policy {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --policy {}", path.display()))
                .map_err(bad)?;
            Some(
                adapter::parse_policy(&text)
                    .with_context(|| format!("invalid --policy {}", path.display()))
                    .map_err(bad)?,
            )
        }
        None => None,
    };
    let (objects, value) = read_snapshot(snapshot)?;
    let (snapshot, warnings) = if objects.is_none() && is_planner_snapshot(&value) {
        let mut snapshot: Snapshot = geometer_api::decode::from_value(&value)
            .context("invalid --snapshot (planner snapshot format)")
            .map_err(bad)?;
        if let Some(p) = policy {
            snapshot.policy = Some(p.policy);
        }
        (snapshot, Vec::new())
    } else {
        let objects = match objects {
            Some(objects) => objects,
            None => adapter::objects_of(value).context("invalid --snapshot").map_err(bad)?,
        };
        let built = adapter::build_snapshot(&objects, &catalog, policy, jiff::Timestamp::now())
            .context("invalid --snapshot")
            .map_err(bad)?;
        // One object that cannot be read is left out and named; the rest is planned.
        let skipped = built.skipped.iter().map(|e| format!("skipped {e}"));
        let warnings = skipped.chain(built.warnings).collect();
        (built.snapshot, warnings)
    };
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    if snapshot.nodes.is_empty() {
        eprintln!("warning: no managed MIG nodes in the snapshot (GPU Operator labels, MIG capacity or MigNode objects)");
    }
    let options =
        PlanOptions { time_limit: args.time_limit_ms.map(Duration::from_millis), ..PlanOptions::default() };
    let mut plan =
        args.solver.plan(&snapshot, &catalog, &options).context("cannot plan this snapshot").map_err(bad)?;
    plan.notes.extend(warnings);
    output::print(args.output, &plan, || plan.render_table_with(&catalog))
}

/// The `--snapshot` file: a List (kubectl get -o json|yaml) read item by item, straight into
/// its types (a JSON file while it is read, never held whole); a planner snapshot, or one
/// object, as a value.
fn read_snapshot(snapshot: &str) -> Result<(Option<adapter::Objects>, Value), Failure> {
    if snapshot != "-" {
        let file = std::fs::File::open(snapshot)
            .with_context(|| format!("cannot read --snapshot {snapshot}"))
            .map_err(Failure::bad_input)?;
        let streamed = adapter::json_list_from(file)
            .with_context(|| format!("cannot read --snapshot {snapshot}"))
            .map_err(Failure::bad_input)?;
        if let Some(objects) = streamed {
            return Ok((Some(objects), Value::Null));
        }
    }
    let text = read_input(snapshot, "--snapshot")?;
    Ok(match adapter::list_objects(&text) {
        Some(objects) => (Some(objects), Value::Null),
        None => {
            (None, adapter::parse_value(&text).context("invalid --snapshot").map_err(Failure::bad_input)?)
        }
    })
}
