//! The human review of a plan, in the spirit of `terraform plan`: what changes, what is
//! evicted, where every pending pod goes or why it does not.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::{slots, GpuPlan, PlacedName, Plan, SliceSource, SolverUsed};
use crate::catalog::Catalog;

fn names(list: &[PlacedName]) -> String {
    if list.is_empty() {
        return "(empty)".to_string();
    }
    list.iter().map(|p| format!("{}@{}", p.profile, p.start)).collect::<Vec<_>>().join(",")
}

/// The GPU before and after: rows of placement units where the catalog knows the model and the
/// instances fit it, else the lists.
fn before_after(gpu: &GpuPlan, catalog: &Catalog) -> String {
    let model = catalog.find(&gpu.model);
    let rows = model.and_then(|m| Some((slots::row(m, &gpu.from)?, slots::row(m, &gpu.to)?)));
    match rows {
        Some((from, to)) => format!("      before: {from}\n      after:  {to}\n"),
        None => format!("      from: {}\n      to:   {}\n", names(&gpu.from), names(&gpu.to)),
    }
}

pub(super) fn table(plan: &Plan, catalog: &Catalog) -> String {
    let mut out = String::new();
    let solver = match plan.solver {
        SolverUsed::Ilp => "ilp",
        SolverUsed::GreedyFallback => "greedy (fallback)",
        SolverUsed::Greedy => "greedy",
    };
    let _ = writeln!(out, "Geometer plan ({solver}, {} ms)", plan.solve_ms);
    if plan.placements_inferred {
        let _ = writeln!(
            out,
            "Note: current placements were inferred from node labels and counts, not read from the GPUs."
        );
    }
    let _ = writeln!(out);

    let changed: Vec<_> = plan.changed_gpus().collect();
    if changed.is_empty() {
        let _ = writeln!(out, "No GPU changes.");
    } else {
        let _ = writeln!(out, "GPU changes:");
    }
    for gpu in &changed {
        let mode = gpu.mode_change().map(|m| format!(", {m}")).unwrap_or_default();
        let _ = writeln!(out, "  ~ {} gpu {} ({}{mode})", gpu.node, gpu.index, gpu.model);
        out.push_str(&before_after(gpu, catalog));
        let mig = |p: &&PlacedName| p.profile != crate::catalog::WHOLE;
        for p in gpu.destroy.iter().filter(mig) {
            let _ = writeln!(out, "      - {}@{}", p.profile, p.start);
        }
        for p in gpu.create.iter().filter(mig) {
            let _ = writeln!(out, "      + {}@{}", p.profile, p.start);
        }
    }
    if !plan.evictions.is_empty() {
        let _ = writeln!(out, "\nEvictions:");
        for e in &plan.evictions {
            let _ = writeln!(
                out,
                "  ! {} from {} gpu {} -> expected on {}",
                e.pod, e.node, e.gpu, e.rescheduled_to
            );
        }
    }
    if !plan.pods.is_empty() {
        let _ = writeln!(out, "\nPending pods:");
        let width = plan.pods.iter().map(|p| p.pod.as_str().len()).max().unwrap_or(0);
        for p in &plan.pods {
            let req = p.requests.iter().map(|(k, v)| format!("{v}x {k}")).collect::<Vec<_>>().join(" + ");
            let (mark, what) = match (p.placement, &p.node, &p.reason) {
                (SliceSource::NewSlices, Some(n), _) => ("+", format!("-> {n} (new slices)")),
                (SliceSource::ExistingSlices, Some(n), _) => {
                    ("=", format!("-> {n} (free slices already there)"))
                }
                (_, _, Some(reason)) => ("x", format!("unmet: {}", reason.summary())),
                _ => ("?", String::new()),
            };
            let _ = writeln!(out, "  {mark} {:width$}  prio {:>6}  {req}  {what}", p.pod, p.priority);
        }
    }
    if !plan.gangs.is_empty() {
        let _ = writeln!(out, "\nGangs (all or nothing):");
        for g in &plan.gangs {
            let mark = if g.complete() { "+" } else { "x" };
            let counted =
                if g.counted > 0 { format!(", {} counted already", g.counted) } else { String::new() };
            let why = g.reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default();
            let _ = writeln!(
                out,
                "  {mark} gang {}: {} of {} members placed{counted}{why}",
                g.name,
                g.counted + g.placed,
                g.min_members
            );
        }
    }
    let nodes: BTreeSet<&str> = changed.iter().map(|g| g.node.as_str()).collect();
    let placed_new = plan.pods.iter().filter(|p| p.placement == SliceSource::NewSlices).count();
    let existing = plan.pods.iter().filter(|p| p.placement == SliceSource::ExistingSlices).count();
    let unmet = plan.pods.len() - placed_new - existing;
    let _ = writeln!(
        out,
        "\nPlan: {} GPU(s) to change on {} node(s), {} eviction(s); {} pending pod(s): {} get new slices, {} fit existing slices, {} unmet.",
        changed.len(),
        nodes.len(),
        plan.evictions.len(),
        plan.pods.len(),
        placed_new,
        existing,
        unmet
    );
    let o = &plan.objective;
    let _ = writeln!(
        out,
        "Objective: demand met {} (LP bound {:.1}, gap {:.1}%), evictions {}, expected pods given room {}, GPUs changed {}, headroom {}, free ranges {}.",
        o.demand_met,
        plan.bound,
        plan.gap * 100.0,
        o.evictions,
        o.expected,
        o.gpus_changed,
        o.headroom,
        o.free_ranges
    );
    for note in &plan.notes {
        let _ = writeln!(out, "Note: {note}");
    }
    out
}
