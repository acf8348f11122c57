//! One pass of the controller over its caches: policies validated, open plans moved along their
//! lifecycle, demand batched and due rounds planned. [`crate::runtime::main_loop`] calls it on every change.

use crate::adapter::PodView;
use crate::dra::objects::DraObjects;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use geometer_solver::catalog::Catalog;
use geometer_solver::GeometryCache;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::{Client, Resource, ResourceExt};
use tokio::time::Instant;

use geometer_api::{MigNode, MigNodePhase, MigPlan, MigPlanPhase, MigPolicy};

use crate::adapter::gangs::PodGroupMin;
use crate::adapter::known::{Interned, Known};
use crate::adapter::mig_objects::{self, KnownInventories};
use crate::adapter::pods::{self as adapter_pods, KnownRequests};
use crate::adapter::{nodes as adapter_nodes, AdapterError};
use crate::planning::batching::{BatchWindows, Batcher};
use crate::planning::propose;
use crate::policy::status as policy_status;
use crate::policy::validation::{KnownProfiles, PolicyReport};
use crate::rollout::lifecycle::{reconcile_plan, PlanInputs};
use crate::runtime::cache::{self, Caches};
use crate::runtime::execute::Executor;
use crate::runtime::fleet;
use crate::runtime::metrics::Metrics;
use crate::runtime::quarantine::{self, BadObject, Quarantine};
use crate::runtime::settings::Settings;
use crate::world;

mod compaction;

/// The cluster as one pass reads it.
struct Seen {
    pods: Vec<Arc<PodView>>,
    /// Every pod's effective requests (those of `pods`).
    requests: KnownRequests,
    /// The inventories of the MigNodes that can be read.
    inventories: KnownInventories,
    nodes: BTreeMap<String, Arc<Node>>,
    mignodes: BTreeMap<String, Arc<MigNode>>,
    policies: Vec<Arc<MigPolicy>>,
    plans: Vec<Arc<MigPlan>>,
    /// Gang minimums declared by PodGroups.
    pod_groups: Vec<PodGroupMin>,
    /// NVIDIA's DRA driver's slices, and the claims, templates and classes pods ask through.
    dra: Arc<DraObjects>,
    /// Objects left out of this pass, and why.
    bad: Vec<BadObject>,
}

pub(crate) struct Controller {
    catalog: Arc<Catalog>,
    known: KnownProfiles,
    caches: Caches,
    executor: Executor,
    metrics: Arc<Metrics>,
    batchers: BTreeMap<String, Batcher>,
    /// Per policy, its newest plan and whether it had ended, as of the last pass.
    newest_seen: BTreeMap<String, (String, bool)>,
    /// Geometry searches, kept for the controller's lifetime: every round asks most again.
    geometries: Arc<GeometryCache>,
    /// Bad objects already reported.
    quarantine: Quarantine,
    /// Succeeded plans already timed (`plan_apply_seconds`); `None` until the first pass.
    timed_plans: Option<std::collections::BTreeSet<String>>,
    /// The pods' requests as the last pass read them: a pod the watch has not replaced since
    /// is not read again.
    requests: KnownRequests,
    /// Distinct requests, each held once.
    interned: Interned<BTreeMap<String, u64>>,
    /// The MigNodes' inventories as the last pass read them.
    inventories: KnownInventories,
}

impl Controller {
    pub(crate) fn new(client: Client, settings: &Settings, caches: Caches, metrics: Arc<Metrics>) -> Self {
        Controller {
            geometries: Arc::new(GeometryCache::new()),
            known: policy_status::known_profiles(&settings.catalog),
            catalog: settings.catalog.clone(),
            caches,
            executor: Executor::new(client, &settings.identity),
            metrics,
            batchers: BTreeMap::new(),
            newest_seen: BTreeMap::new(),
            quarantine: Quarantine::default(),
            timed_plans: None,
            requests: KnownRequests::default(),
            interned: Interned::default(),
            inventories: KnownInventories::default(),
        }
    }

    /// The caches as this pass uses them: objects that cannot be read or used are left out
    /// and listed in `bad`.
    fn read(&mut self) -> Seen {
        let mut bad = Vec::new();
        let pods = readable(cache::split(&self.caches.pods), &mut bad);
        let (requests, unreadable) = adapter_pods::read_requests(&self.requests, &pods, &mut self.interned);
        self.requests = requests.clone();
        for (pod, e) in &unreadable {
            bad.push(BadObject::invalid(&**pod, e.to_string()));
        }
        let pods: Vec<Arc<PodView>> = pods.into_iter().filter(|p| requests.get(p).is_some()).collect();
        let nodes = readable(cache::split(&self.caches.nodes), &mut bad);
        let mignodes = readable(cache::split(&self.caches.mignodes), &mut bad);
        let mut policies = readable(cache::split(&self.caches.policies), &mut bad);
        let mut plans = readable(cache::split(&self.caches.plans), &mut bad);
        let nodes = usable(nodes, &mut bad, |n| adapter_nodes::planner_node(n, &BTreeMap::new()).map(|_| ()));
        // A MigNode whose inventory cannot be read stays (its node is left out of each round,
        // which says why); it is reported here too.
        let (inventories, unreadable) =
            Known::read(&self.inventories, &mignodes, |m| mig_objects::inventory(m).map(Arc::new));
        self.inventories = inventories.clone();
        for (m, e) in unreadable {
            bad.push(BadObject::invalid(&*m, e.to_string()));
        }
        policies.sort_by_key(|p| p.name_any());
        plans.sort_by_key(|p| (p.creation_timestamp().map(|t| t.0), p.name_any()));
        let pod_groups = self.pod_groups(&mut bad);
        Seen {
            pods,
            requests,
            inventories,
            nodes: by_name(nodes),
            mignodes: by_name(mignodes),
            policies,
            plans,
            pod_groups,
            dra: self.caches.dra(),
            bad,
        }
    }

    /// The cached PodGroups' minimums; one that cannot be read is reported and left out (its
    /// pods are planned on their own).
    fn pod_groups(&self, bad: &mut Vec<BadObject>) -> Vec<PodGroupMin> {
        let mut out = Vec::new();
        for (ar, store) in &self.caches.pod_groups {
            for object in store.state() {
                match cache::pod_group_of(&object, ar) {
                    Ok(Some(group)) => out.push(group),
                    Ok(None) => {}
                    Err(e) => bad.push(BadObject::invalid_dynamic(&object, ar, e.to_string())),
                }
            }
        }
        out
    }

    /// One pass; returns when the next pass is due even if nothing changes.
    pub(crate) async fn pass(&mut self) -> Instant {
        let now = Timestamp::now();
        let started = Instant::now();
        let seen = self.read();
        let read_ms = started.elapsed().as_millis() as u64;
        for group in self.quarantine.report(&seen.bad, now) {
            self.executor.run_group(group).await;
        }
        let nodes: Vec<Arc<Node>> = seen.nodes.values().cloned().collect();
        let facts = policy_status::node_facts(&nodes, &seen.mignodes, &self.catalog);
        let reports = policy_status::validate(&seen.policies, &facts, &self.known);
        let newest = policy_status::newest_plans(&seen.plans);
        for group in policy_status::reconcile_policies(
            &seen.policies,
            &reports,
            &seen.mignodes,
            &newest,
            &self.catalog,
            now,
        ) {
            self.executor.run_group(group).await;
        }
        let mut claims = crate::adapter::dra::ClaimDemand::new(&seen.dra, &seen.mignodes, &self.catalog);
        let demand = propose::demand(&seen.pods, &mut claims);
        let holders = propose::holders(&seen.pods, &seen.requests);
        let mut wake = self.plans(&seen, &reports, &newest, now).await;
        self.tend_compactions(&seen, now).await;
        let before_rounds_ms = started.elapsed().as_millis() as u64;
        wake = wake.min(self.rounds(&seen, &reports, &newest, (&demand, &holders), (now, started)).await);
        self.count(&seen, &reports, &demand);
        for seconds in fleet::newly_succeeded(&seen.plans, &mut self.timed_plans) {
            self.metrics.observe_plan_applied(seconds);
        }
        tracing::debug!(
            read_ms,
            before_rounds_ms,
            pass_ms = started.elapsed().as_millis() as u64,
            "pass done"
        );
        self.metrics.count_pass();
        wake
    }

    /// Moves every open plan along its lifecycle.
    async fn plans(
        &self,
        seen: &Seen,
        reports: &BTreeMap<String, PolicyReport>,
        newest: &BTreeMap<String, Arc<MigPlan>>,
        now: Timestamp,
    ) -> Instant {
        let mut wake = Instant::now() + Duration::from_secs(3600);
        let open: Vec<&Arc<MigPlan>> = seen.plans.iter().filter(|p| !p.phase().is_final()).collect();
        if open.is_empty() {
            return wake;
        }
        let world = world::world_view(seen.pods.iter().map(|p| &**p), seen.mignodes.values().map(|m| &**m));
        for plan in open {
            let policy_name = &plan.spec.policy;
            let policy = seen.policies.iter().find(|p| &p.name_any() == policy_name).map(|p| &**p);
            let report = reports.get(policy_name);
            let managed: BTreeMap<String, Arc<MigNode>> = report
                .map(|r| {
                    r.matched_nodes
                        .iter()
                        .filter_map(|n| Some((n.clone(), seen.mignodes.get(n)?.clone())))
                        .collect()
                })
                .unwrap_or_default();
            let newer = newest.get(policy_name).map(|n| n.name_any()).filter(|n| *n != plan.name_any());
            let another_applying = seen
                .plans
                .iter()
                .find(|p| {
                    &p.spec.policy == policy_name
                        && p.name_any() != plan.name_any()
                        && p.phase() == MigPlanPhase::Applying
                })
                .map(|p| p.name_any());
            let decision = reconcile_plan(&PlanInputs {
                plan,
                policy,
                policy_valid: report.is_some_and(|r| r.is_valid()),
                newer: newer.as_deref(),
                another_applying: another_applying.as_deref(),
                world: &world,
                mignodes: &managed,
                now,
            });
            if let Some(at) = decision.recheck_at {
                wake = wake.min(instant_of(at, now));
            }
            if !decision.actions.is_empty() {
                self.executor.run_group(decision.actions).await;
            }
        }
        wake
    }

    /// Batches each valid policy's demand and plans the batches that are due.
    async fn rounds(
        &mut self,
        seen: &Seen,
        reports: &BTreeMap<String, PolicyReport>,
        newest: &BTreeMap<String, Arc<MigPlan>>,
        (demand, holders): (&propose::DemandByPod, &std::collections::BTreeSet<geometer_solver::PodKey>),
        (now, read_at): (Timestamp, Instant),
    ) -> Instant {
        let instant = Instant::now();
        let mut wake = instant + Duration::from_secs(3600);
        self.batchers.retain(|name, _| reports.contains_key(name));
        for policy in &seen.policies {
            let name = policy.name_any();
            let Some(report) = reports.get(&name).filter(|r| r.is_valid()) else { continue };
            let windows = BatchWindows::from_seconds(
                policy.spec.batching.idle_seconds,
                policy.spec.batching.max_seconds,
            );
            let batcher = self.batchers.entry(name.clone()).or_insert_with(|| Batcher::new(windows));
            batcher.set_windows(windows);
            // When the newest plan ends, the demand it left deserves a new look.
            let now_newest = newest.get(&name).map(|p| (p.name_any(), p.phase().is_final()));
            if let (Some((was, false)), Some((is, true))) = (self.newest_seen.get(&name), &now_newest) {
                if was == is {
                    batcher.reset();
                }
            }
            if let Some(n) = now_newest {
                self.newest_seen.insert(name.clone(), n);
            }
            // The demand is as the caches were when this pass read them: a change counts from
            // then, not from when the reading was done.
            batcher.observe(read_at, propose::demand_fingerprint(policy, demand, holders));
            if let Some(due) = batcher.poll(instant) {
                tracing::info!(policy = %name, trigger = due.trigger.as_str(), waited_ms = due.waited.as_millis() as u64, "planning round");
                let busy = seen.plans.iter().any(|p| {
                    p.spec.policy == name
                        && matches!(p.phase(), MigPlanPhase::Approved | MigPlanPhase::Applying)
                });
                let retry = if busy {
                    self.metrics.count_round(crate::runtime::metrics::RoundOutcome::Skipped);
                    true
                } else {
                    self.round(policy, report, seen, now).await
                };
                if retry {
                    if let Some(b) = self.batchers.get_mut(&name) {
                        b.retry(instant);
                    }
                }
            }
            if let Some(at) = self.batchers.get(&name).and_then(Batcher::due_at) {
                wake = wake.min(at);
            }
        }
        wake
    }

    /// Plans one policy's batch; true when the round should be tried again later.
    async fn round(&self, policy: &MigPolicy, report: &PolicyReport, seen: &Seen, now: Timestamp) -> bool {
        use crate::runtime::metrics::RoundOutcome;
        let input = propose::RoundInput {
            policy,
            managed: &report.matched_nodes,
            nodes: &seen.nodes,
            mignodes: &seen.mignodes,
            pods: &seen.pods,
            requests: &seen.requests,
            inventories: &seen.inventories,
            pod_groups: &seen.pod_groups,
            dra: &seen.dra,
            now,
        };
        let started = Instant::now();
        let prepared = match propose::prepare(&input, &self.catalog) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(policy = %policy.name_any(), error = %e, "cannot build the planning snapshot; retrying");
                self.metrics.count_round(RoundOutcome::Error);
                return true;
            }
        };
        let prepare_ms = started.elapsed().as_millis() as u64;
        let (catalog, owned_policy) = (self.catalog.clone(), policy.clone());
        let geometries = Arc::clone(&self.geometries);
        let solved = tokio::task::spawn_blocking(move || {
            let solved = propose::solve(&prepared, &catalog, &owned_policy, &geometries);
            (prepared, solved)
        })
        .await;
        let (prepared, solved) = match solved {
            Ok((prepared, Ok(plan))) => (prepared, plan),
            Ok((_, Err(e))) => {
                tracing::warn!(policy = %policy.name_any(), error = %e, "the planner rejected the snapshot; retrying");
                self.metrics.count_round(RoundOutcome::Error);
                return true;
            }
            Err(e) => {
                tracing::error!(policy = %policy.name_any(), error = %e, "the planner panicked; retrying");
                self.metrics.count_round(RoundOutcome::Error);
                return true;
            }
        };
        self.metrics.observe_solve(solved.solve_ms as f64 / 1000.0);
        self.metrics.set_gap(&policy.name_any(), solved.gap);
        self.metrics.set_dynamic_mig_blocked(&prepared.blocked_claims);
        let solved_at = Instant::now();
        // The pods the round's events are about: pending ones.
        let pods: BTreeMap<geometer_solver::PodKey, &PodView> = seen
            .pods
            .iter()
            .filter(|p| crate::adapter::pods::bound_node(p).is_none())
            .map(|p| (crate::adapter::pods::key(p), &**p))
            .collect();
        let open: Vec<&MigPlan> = seen
            .plans
            .iter()
            .filter(|p| p.spec.policy == policy.name_any() && p.phase() == MigPlanPhase::Proposed)
            .map(|p| &**p)
            .collect();
        let decision = propose::decide(policy, &solved, &prepared, &open, &pods, now);
        self.start_compactions(policy, &report.matched_nodes, &prepared.blocked_claims, seen, now).await;
        tracing::info!(policy = %policy.name_any(), prepare_ms, solve_ms = solved.solve_ms,
            wall_ms = started.elapsed().as_millis() as u64, decide_ms = solved_at.elapsed().as_millis() as u64,
            "planning round done");
        match decision {
            propose::Decision::Publish { plan, events } => {
                tracing::info!(policy = %policy.name_any(), plan = %plan.name_any(), gpus = plan.spec.summary.gpus_changed, pods = plan.spec.summary.pods_helped, "publishing plan");
                let mut group = vec![crate::runtime::actions::Action::CreatePlan(plan)];
                group.extend(events);
                let outcome = self.executor.run_group(group).await;
                let failed = outcome.errors + outcome.conflicts > 0 && outcome.done == 0;
                self.metrics.count_round(if failed { RoundOutcome::Error } else { RoundOutcome::Published });
                failed
            }
            propose::Decision::Unchanged { plan } => {
                tracing::debug!(policy = %policy.name_any(), plan = %plan, "the open plan already says this");
                self.metrics.count_round(RoundOutcome::Unchanged);
                false
            }
            propose::Decision::NothingToDo { events } => {
                self.executor.run_group(events).await;
                self.metrics.count_round(RoundOutcome::Skipped);
                // Nodes that settle later may make room: look again then.
                prepared.settling
            }
        }
    }

    /// Gauges from a full recount.
    fn count(&self, seen: &Seen, reports: &BTreeMap<String, PolicyReport>, demand: &propose::DemandByPod) {
        let mut plans: BTreeMap<String, i64> = BTreeMap::new();
        for plan in &seen.plans {
            *plans.entry(format!("{:?}", plan.phase())).or_default() += 1;
        }
        self.metrics.set_plans_by_phase(&plans);
        let mut by_profile: BTreeMap<String, i64> = BTreeMap::new();
        for (profile, slices) in demand.values().flatten() {
            *by_profile.entry(profile.clone()).or_default() += i64::from(*slices);
        }
        self.metrics.set_demand_by_profile(&by_profile);
        let mut gpus: BTreeMap<String, i64> = BTreeMap::new();
        let managed: std::collections::BTreeSet<&String> =
            reports.values().flat_map(|r| &r.matched_nodes).collect();
        for node in managed.into_iter().filter_map(|n| seen.mignodes.get(n)) {
            let Some(status) = &node.status else { continue };
            let state = match status.phase {
                MigNodePhase::Ready => "Ready",
                MigNodePhase::Failed => "Failed",
                _ => "Reconfiguring",
            };
            *gpus.entry(state.to_string()).or_default() += status.gpus.len() as i64;
        }
        self.metrics.set_gpus_by_state(&gpus);
        self.metrics.set_skipped_by_kind(&quarantine::count_by_kind(&seen.bad));
        self.metrics.set_reclaimable_by_namespace(&self.reclaimable(seen));
        self.metrics.set_slices(&fleet::slices(&seen.mignodes, reports));
        self.metrics.set_demand_age(&fleet::oldest_demand(&seen.pods, demand, Timestamp::now()));
    }

    /// Whole GPUs right-sizing would give back, by namespace, with the default settings of
    /// `geometer recommend`.
    fn reclaimable(&self, seen: &Seen) -> BTreeMap<String, i64> {
        let usage: Vec<_> = seen.mignodes.values().flat_map(|m| m.usage().iter().cloned()).collect();
        let pods: Vec<&PodView> = seen.pods.iter().map(|p| &**p).collect();
        let settings = crate::rightsizing::recommend::Settings::default();
        let mut out: BTreeMap<String, i64> = BTreeMap::new();
        for r in crate::rightsizing::recommend::recommend(&usage, &pods, &self.catalog, &settings) {
            *out.entry(r.owner.namespace.clone()).or_default() += i64::from(r.verdict.gpus_given_back());
        }
        out
    }
}

/// The objects of a cache that decoded; the others go to `bad`.
fn readable<K: Resource<DynamicType = ()>>(split: cache::Split<K>, bad: &mut Vec<BadObject>) -> Vec<Arc<K>> {
    bad.extend(split.unreadable.iter().map(|u| BadObject::unreadable::<K>(u)));
    split.read
}

/// The objects `check` accepts; the others go to `bad` with its error.
fn usable<K: Resource<DynamicType = ()>>(
    objects: Vec<Arc<K>>,
    bad: &mut Vec<BadObject>,
    check: impl Fn(&K) -> Result<(), AdapterError>,
) -> Vec<Arc<K>> {
    let mut out = Vec::with_capacity(objects.len());
    for object in objects {
        match check(&object) {
            Ok(()) => out.push(object),
            Err(e) => bad.push(BadObject::invalid(&*object, e.to_string())),
        }
    }
    out
}

fn by_name<K: ResourceExt>(list: Vec<Arc<K>>) -> BTreeMap<String, Arc<K>> {
    list.into_iter().map(|o| (o.name_any(), o)).collect()
}

fn instant_of(at: Timestamp, now: Timestamp) -> Instant {
    let ahead = at.duration_since(now);
    let ahead = Duration::try_from(ahead).unwrap_or(Duration::ZERO);
    Instant::now() + ahead
}
