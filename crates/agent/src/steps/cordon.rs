//! Cordoning the node, and knowing whose cordon it is.
//!
//! The agent marks a cordon it makes with the `geometer.dev/cordoned-by` annotation, in the same
//! patch that sets `spec.unschedulable`, so the mark and the cordon appear together or not at
//! all. It only ever lifts a cordon that carries the mark: a node a person cordoned stays
//! cordoned. Both patches carry the node's `resourceVersion`, so a person cordoning or
//! uncordoning between our read and our write makes the patch fail (409) instead of being
//! overwritten; the agent then reads the node again.

use k8s_openapi::api::core::v1::Node;
use kube::api::Patch;
use kube::Api;
use serde_json::{json, Value};

use geometer_api::CORDONED_BY_ANNOTATION;

/// Value of the cordon mark.
pub(crate) const CORDON_MARK: &str = "geometer-agent";

/// Who holds the node's cordon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CordonState {
    /// Schedulable, no mark.
    Open,
    /// Cordoned by us (unschedulable and marked).
    Ours,
    /// Cordoned, without our mark: a person (or another tool) did it. Never lifted by us.
    Theirs,
    /// Our mark, but someone made the node schedulable again. The mark is stale.
    MarkOnly,
}

impl CordonState {
    pub(crate) fn of(node: &Node) -> CordonState {
        let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
        let marked =
            node.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(CORDONED_BY_ANNOTATION));
        match (unschedulable, marked) {
            (false, false) => CordonState::Open,
            (true, true) => CordonState::Ours,
            (true, false) => CordonState::Theirs,
            (false, true) => CordonState::MarkOnly,
        }
    }

    /// Whether the scheduler keeps new pods off the node.
    pub(crate) fn unschedulable(self) -> bool {
        matches!(self, CordonState::Ours | CordonState::Theirs)
    }

    /// Whether the mark is there (so the agent owes an uncordon).
    pub(crate) fn marked(self) -> bool {
        matches!(self, CordonState::Ours | CordonState::MarkOnly)
    }
}

/// Merge patch that cordons the node and marks the cordon as ours; `None` when the node is
/// already unschedulable without our mark (a person's cordon is never claimed).
pub(crate) fn cordon_patch(node: &Node) -> Option<Value> {
    match CordonState::of(node) {
        CordonState::Theirs => None,
        _ => Some(json!({
            "metadata": {
                "resourceVersion": node.metadata.resource_version,
                "annotations": { CORDONED_BY_ANNOTATION: CORDON_MARK },
            },
            "spec": { "unschedulable": true },
        })),
    }
}

/// Merge patch that lifts our cordon and removes the mark; `None` when there is no mark (a
/// cordon without it is someone else's). With a stale mark only the mark goes.
pub(crate) fn uncordon_patch(node: &Node) -> Option<Value> {
    match CordonState::of(node) {
        CordonState::Ours => Some(json!({
            "metadata": {
                "resourceVersion": node.metadata.resource_version,
                "annotations": { CORDONED_BY_ANNOTATION: null },
            },
            "spec": { "unschedulable": null },
        })),
        CordonState::MarkOnly => Some(json!({
            "metadata": {
                "resourceVersion": node.metadata.resource_version,
                "annotations": { CORDONED_BY_ANNOTATION: null },
            },
        })),
        CordonState::Open | CordonState::Theirs => None,
    }
}

/// What a cordon or uncordon request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The node was patched.
    Patched,
    /// Nothing to do (a person's cordon, or no mark to lift).
    Nothing,
    /// The node changed since it was read (409); read it again and decide again.
    Stale,
}

/// Cordons `node` (as read) and marks the cordon as ours.
pub async fn cordon(nodes: &Api<Node>, node: &Node) -> Result<Applied, kube::Error> {
    send(nodes, node, cordon_patch(node)).await
}

/// Lifts our cordon from `node` (as read); a cordon without our mark is left alone.
pub async fn uncordon(nodes: &Api<Node>, node: &Node) -> Result<Applied, kube::Error> {
    send(nodes, node, uncordon_patch(node)).await
}

async fn send(nodes: &Api<Node>, node: &Node, patch: Option<Value>) -> Result<Applied, kube::Error> {
    let Some(patch) = patch else { return Ok(Applied::Nothing) };
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match nodes.patch(name, &crate::patch_params(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(Applied::Patched),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Applied::Stale),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;

    use super::*;

    fn node(unschedulable: bool, marked: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("gpu-1".into());
        n.metadata.resource_version = Some("42".into());
        if marked {
            n.metadata.annotations =
                Some([(CORDONED_BY_ANNOTATION.to_string(), CORDON_MARK.to_string())].into());
        }
        n.spec = Some(NodeSpec { unschedulable: Some(unschedulable), ..Default::default() });
        n
    }

    #[test]
    fn states_follow_the_flag_and_the_mark() {
        assert_eq!(CordonState::of(&node(false, false)), CordonState::Open);
        assert_eq!(CordonState::of(&node(true, true)), CordonState::Ours);
        assert_eq!(CordonState::of(&node(true, false)), CordonState::Theirs);
        assert_eq!(CordonState::of(&node(false, true)), CordonState::MarkOnly);
        assert_eq!(CordonState::of(&Node::default()), CordonState::Open);
    }

    #[test]
    fn cordon_sets_flag_and_mark_together_under_the_read_version() {
        let patch = cordon_patch(&node(false, false)).expect("an open node is cordoned");
        assert_eq!(
            patch,
            json!({
                "metadata": {"resourceVersion": "42", "annotations": {"geometer.dev/cordoned-by": "geometer-agent"}},
                "spec": {"unschedulable": true},
            })
        );
    }

    #[test]
    fn a_persons_cordon_is_never_claimed_or_lifted() {
        let theirs = node(true, false);
        assert_eq!(cordon_patch(&theirs), None);
        assert_eq!(uncordon_patch(&theirs), None);
        assert_eq!(uncordon_patch(&node(false, false)), None);
    }

    #[test]
    fn uncordon_lifts_only_our_cordon_and_drops_the_mark() {
        assert_eq!(
            uncordon_patch(&node(true, true)),
            Some(json!({
                "metadata": {"resourceVersion": "42", "annotations": {"geometer.dev/cordoned-by": null}},
                "spec": {"unschedulable": null},
            }))
        );
        // Someone already lifted it: only the stale mark goes, the flag is left alone.
        assert_eq!(
            uncordon_patch(&node(false, true)),
            Some(
                json!({"metadata": {"resourceVersion": "42", "annotations": {"geometer.dev/cordoned-by": null}}})
            )
        );
    }
}
