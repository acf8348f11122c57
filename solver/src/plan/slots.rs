//! A GPU's geometry drawn as a row of its placement units, so that a reviewer sees at a glance
//! where each instance sits, what is free and what a change moves. Each unit is a fixed-width
//! cell; an instance spans the cells of the units it covers (NVML's placement: start and size
//! in memory slices, from the catalog) and a free unit is an empty cell:
//!
//! ```text
//! [ 1g.5gb ][ 1g.5gb ][        ][        ][           3g.20gb          ]
//! ```

use std::collections::BTreeMap;

use super::PlacedName;
use crate::catalog::GpuModel;

/// Characters per placement unit, brackets included: wide enough for `1g.10gb` and `1g.20gb`.
const UNIT_WIDTH: usize = 9;

/// The row of `instances` on `model`, or `None` when an instance is not one the model can hold
/// where it is (unknown profile, past the last unit, overlapping another): then only the list
/// says what is there.
pub fn row(model: &GpuModel, instances: &[PlacedName]) -> Option<String> {
    let units = model.placement_units as usize;
    let mut covered = vec![false; units];
    let mut starts: BTreeMap<usize, (usize, &str)> = BTreeMap::new();
    for placed in instances {
        let profile = model.profile_info(model.profile(&placed.profile)?);
        let (start, size) = (placed.start as usize, profile.size as usize);
        let span = covered.get_mut(start..start + size)?;
        if size == 0 || span.iter().any(|&c| c) {
            return None;
        }
        span.iter_mut().for_each(|c| *c = true);
        starts.insert(start, (size, placed.profile.as_str()));
    }
    let mut out = String::with_capacity(units * UNIT_WIDTH);
    let mut unit = 0;
    while unit < units {
        let (size, label) = starts.get(&unit).copied().unwrap_or((1, ""));
        out.push_str(&cell(label, size * UNIT_WIDTH));
        unit += size;
    }
    Some(out)
}

/// `[label]` centred in `width` characters; a name too long for one unit is cut to its compute
/// part (`1g.5gb+me` -> `1g`).
fn cell(label: &str, width: usize) -> String {
    let inner = width - 2;
    let label = if label.len() <= inner { label } else { label.split('.').next().unwrap_or(label) };
    let label: String = label.chars().take(inner).collect();
    format!("[{label:^inner$}]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn placed(list: &[(&str, u8)]) -> Vec<PlacedName> {
        list.iter().map(|&(p, s)| PlacedName { profile: p.into(), start: s }).collect()
    }

    #[test]
    fn instances_span_the_units_they_cover_and_free_units_are_empty() {
        let a100 = Catalog::builtin().find("A100-40GB").unwrap();
        let geometry = placed(&[("3g.20gb", 4), ("1g.5gb", 0), ("1g.5gb", 2)]);
        let free = format!("[{}]", " ".repeat(7));
        let three = format!("[{:^34}]", "3g.20gb");
        assert_eq!(row(a100, &geometry).unwrap(), format!("[1g.5gb ]{free}[1g.5gb ]{free}{three}"));
        assert_eq!(row(a100, &[]).unwrap(), free.repeat(8), "an empty GPU is eight free units");
    }

    #[test]
    fn a_name_too_long_for_its_cells_is_cut_to_its_compute_part() {
        let a100 = Catalog::builtin().find("A100-40GB").unwrap();
        let text = row(a100, &placed(&[("1g.5gb+me", 0)])).unwrap();
        assert!(text.starts_with("[  1g   ]"), "{text}");
        assert_eq!(text.len(), 8 * UNIT_WIDTH);
    }

    #[test]
    fn what_the_model_cannot_hold_there_is_not_drawn() {
        let a100 = Catalog::builtin().find("A100-40GB").unwrap();
        assert_eq!(row(a100, &placed(&[("3g.20gb", 4), ("4g.20gb", 0), ("1g.5gb", 4)])), None, "overlap");
        assert_eq!(row(a100, &placed(&[("3g.20gb", 6)])), None, "past the last unit");
        assert_eq!(row(a100, &placed(&[("9g.99gb", 0)])), None, "unknown profile");
    }
}
