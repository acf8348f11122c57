//! What to destroy and create to turn one geometry into another.

use serde::Serialize;

use crate::catalog::GpuModel;

use super::{sort_largest_first, Geometry, Placed};

/// Operations between two geometries. Applying it: remove `destroy`, then add `create`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GeometryDiff {
    /// In both geometries (same profile, same start): never touched.
    pub keep: Vec<Placed>,
    /// Only in `from`.
    pub destroy: Vec<Placed>,
    /// Only in `to`, largest first: the order in which NVML packs best.
    pub create: Vec<Placed>,
}

impl GeometryDiff {
    pub fn is_empty(&self) -> bool {
        self.destroy.is_empty() && self.create.is_empty()
    }

    /// `from` with the diff applied.
    pub fn apply(&self, from: &Geometry) -> Geometry {
        let mut rest: Vec<Placed> = from.instances().to_vec();
        for d in &self.destroy {
            if let Some(i) = rest.iter().position(|p| p == d) {
                rest.remove(i);
            }
        }
        rest.extend(self.create.iter().copied());
        Geometry::new(rest)
    }
}

/// Multiset difference: an instance present in both (same profile and start) is kept, however
/// the rest changes.
pub fn diff(from: &Geometry, to: &Geometry, model: &GpuModel) -> GeometryDiff {
    let mut keep = Vec::new();
    let mut destroy = Vec::new();
    let mut create = Vec::new();
    let (a, b) = (from.instances(), to.instances());
    let (mut i, mut j) = (0, 0);
    // Both are sorted: a merge walk pairs equal instances one to one (duplicates included).
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                keep.push(*x);
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x < y => {
                destroy.push(*x);
                i += 1;
            }
            (Some(x), None) => {
                destroy.push(*x);
                i += 1;
            }
            (_, Some(y)) => {
                create.push(*y);
                j += 1;
            }
            (None, None) => break,
        }
    }
    sort_largest_first(&mut create, model);
    GeometryDiff { keep, destroy, create }
}
