//! Fixed layouts from NVIDIA's mig-parted `config-default.yaml` (v0.15.0), the geometry an admin
//! picks once per node. Transcribed for the GPUs whose entries name their profiles; a model
//! matches the first entry whose profile names it has.

use std::fmt;

use super::{PlanView, Replan, Slot, Strategy, StrategyError, StrategyKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaticLayout {
    /// `all-balanced`: two 1g, one 2g and one 3g instance (A30: two 1g, one 2g).
    AllBalanced,
    /// `all-1g.<mem>`: the smallest 1g profile, as many as fit (`all-1g.10gb`: 7 on an A100-80GB).
    All1g,
}

impl fmt::Display for StaticLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StaticLayout::AllBalanced => "all-balanced",
            StaticLayout::All1g => "all-1g",
        })
    }
}

type Layout = &'static [(&'static str, u32)];

/// mig-parted `all-balanced`, one entry per device-filter group.
const ALL_BALANCED: &[Layout] = &[
    &[("1g.23gb", 2), ("2g.47gb", 1), ("3g.93gb", 1)],  // GB200
    &[("1g.35gb", 2), ("2g.70gb", 1), ("3g.139gb", 1)], // GB300
    &[("1g.24gb", 2), ("2g.48gb", 1)],                  // RTX PRO 6000 Blackwell
    &[("1g.23gb", 2), ("2g.45gb", 1), ("3g.90gb", 1)],  // B200
    &[("1g.34gb", 2), ("2g.67gb", 1), ("3g.135gb", 1)], // B300
    &[("1g.18gb", 2), ("2g.36gb", 1), ("3g.72gb", 1)],  // GH200 144G HBM3e
    &[("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)],  // H200 141GB, H200 NVL
    &[("1g.12gb", 2), ("2g.24gb", 1), ("3g.47gb", 1)],  // H100 NVL, H800 NVL
    &[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)],  // H100-80GB, H800-80GB, A100-80GB, A800-80GB
    &[("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)],   // A100-40GB, A800-40GB
    &[("1g.6gb", 2), ("2g.12gb", 1)],                   // A30-24GB
    &[("1g.12gb", 2), ("2g.24gb", 1), ("3g.48gb", 1)],  // H100-96GB, PG506-96GB, GH200, H20
];

/// mig-parted `all-1g.<mem>` for the smallest 1g profile of each family.
const ALL_1G: &[Layout] = &[
    &[("1g.5gb", 7)],  // A100-40GB
    &[("1g.10gb", 7)], // H100-80GB, A100-80GB
    &[("1g.6gb", 4)],  // A30
    &[("1g.12gb", 7)], // H100 NVL, H100-96GB, GH200
    &[("1g.18gb", 7)], // H200-141GB, GH200 144G
    &[("1g.23gb", 7)], // B200, GB200
    &[("1g.34gb", 7)], // B300
    &[("1g.35gb", 7)], // GB300
    &[("1g.24gb", 4)], // RTX PRO 6000 Blackwell
];

impl StaticLayout {
    /// The layout's instances for a model with these profile names, or `None` if the layout
    /// has no entry for it.
    pub fn instances_for(&self, has_profile: impl Fn(&str) -> bool) -> Option<Vec<(String, u32)>> {
        let table = match self {
            StaticLayout::AllBalanced => ALL_BALANCED,
            StaticLayout::All1g => ALL_1G,
        };
        table
            .iter()
            .find(|layout| layout.iter().all(|(p, _)| has_profile(p)))
            .map(|layout| layout.iter().map(|(p, c)| (p.to_string(), *c)).collect())
    }
}

/// A static strategy: each cluster model's geometry, placed once up front.
pub struct StaticStrategy {
    pub layout: StaticLayout,
    /// Geometry by cluster model index.
    pub geometries: Vec<Vec<Slot>>,
}

impl Strategy for StaticStrategy {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Static(self.layout)
    }

    fn initial_geometry(&self, model: usize) -> Vec<Slot> {
        self.geometries[model].clone()
    }

    fn plan(&mut self, _view: &PlanView<'_>) -> Result<Option<Replan>, StrategyError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_entry_whose_profiles_the_model_has() {
        let a100_80 = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"];
        let has = |p: &str| a100_80.contains(&p);
        assert_eq!(
            StaticLayout::AllBalanced.instances_for(has).unwrap(),
            [("1g.10gb".to_string(), 2), ("2g.20gb".to_string(), 1), ("3g.40gb".to_string(), 1)]
        );
        assert_eq!(StaticLayout::All1g.instances_for(has).unwrap(), [("1g.10gb".to_string(), 7)]);
        assert_eq!(StaticLayout::All1g.instances_for(|_| false), None);
    }
}
