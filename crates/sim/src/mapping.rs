//! How a GPU share (`gpu_milli`) becomes a MIG profile. The trace does not say whether a share
//! is of compute or of memory, so the rule is the user's choice and is always reported.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use geometer_solver::catalog::WHOLE;

use crate::cluster::{ModelInfo, ProfileInfo};
use crate::trace::GpuRequest;

/// What a trace pod that asks for whole GPUs (`gpu_milli` 1000, any `num_gpu`; or the `whole`
/// profile by name) becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WholeGpus {
    /// Demand for the `whole` profile (`nvidia.com/gpu`): one GPU with MIG mode off per GPU
    /// asked for, which only a GPU whose MIG mode is off can serve, and which takes all of it.
    #[default]
    Whole,
    /// The model's full-GPU MIG profile (`7g.80gb`) once per GPU: MIG stays on everywhere (the
    /// simulator's only mapping before it modelled MIG mode off).
    FullProfile,
}

impl FromStr for WholeGpus {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "whole" => Ok(WholeGpus::Whole),
            "full-profile" => Ok(WholeGpus::FullProfile),
            _ => Err(format!(
                "--whole-gpus {text:?}: expected whole (GPUs with MIG off) or full-profile (the full-GPU MIG profile)"
            )),
        }
    }
}

impl fmt::Display for WholeGpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WholeGpus::Whole => "whole",
            WholeGpus::FullProfile => "full-profile",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mapping {
    /// The share of the GPU's compute slices, rounded up to the next profile's compute size
    /// (`470` on a 7-slice GPU: 3.29 slices, so `4g`). Ties go to the profile with less memory.
    Compute,
    /// The share of the GPU's memory slices, rounded up to the next profile's memory size
    /// (`470` of 8 slices: 3.76, so a 4-slice profile, `3g.40gb`). Ties go to less compute.
    Memory,
    /// The share of a source GPU with this much memory (GiB), e.g. the 32 GiB of a V100: the
    /// smallest profile with at least that many MiB. Ties go to less compute.
    MemoryOf { gib: u32 },
}

impl FromStr for Mapping {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "compute" => Ok(Mapping::Compute),
            "memory" => Ok(Mapping::Memory),
            _ => match text.strip_prefix("memory:").map(|g| g.parse::<u32>()) {
                Some(Ok(gib)) if (1..=10_000).contains(&gib) => Ok(Mapping::MemoryOf { gib }),
                _ => Err(format!(
                    "--mapping {text:?}: expected compute, memory, or memory:GIB (the source GPU's memory, e.g. memory:32)"
                )),
            },
        }
    }
}

impl fmt::Display for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mapping::Compute => write!(f, "compute"),
            Mapping::Memory => write!(f, "memory"),
            Mapping::MemoryOf { gib } => write!(f, "memory:{gib}"),
        }
    }
}

impl Mapping {
    /// The profile of `model` that a `gpu_milli` share of one GPU maps to (1..=1000).
    pub fn profile_for_share<'m>(&self, model: &'m ModelInfo, gpu_milli: u32) -> &'m ProfileInfo {
        let full = model.full_profile().expect("cluster models always have a full-GPU profile");
        if gpu_milli >= 1000 {
            return full;
        }
        let milli = u64::from(gpu_milli);
        let by_compute = |need: u64| {
            model
                .profiles
                .iter()
                .filter(|p| u64::from(p.compute_slices) >= need)
                .min_by_key(|p| (p.compute_slices, p.memory_slices))
        };
        let by_memory_slices = |need: u64| {
            model
                .profiles
                .iter()
                .filter(|p| u64::from(p.memory_slices) >= need)
                .min_by_key(|p| (p.memory_slices, p.compute_slices))
        };
        let chosen = match self {
            Mapping::Compute => by_compute((milli * u64::from(model.compute_slices)).div_ceil(1000)),
            Mapping::Memory => by_memory_slices((milli * u64::from(model.memory_slices)).div_ceil(1000)),
            Mapping::MemoryOf { gib } => {
                let need_mib = (milli * u64::from(*gib) * 1024).div_ceil(1000);
                model
                    .profiles
                    .iter()
                    .filter(|p| p.memory_mib >= need_mib)
                    .min_by_key(|p| (p.memory_mib, p.compute_slices))
            }
        };
        chosen.unwrap_or(full)
    }

    /// The instances a request asks for. Whole GPUs (`gpu_milli` 1000, any `num_gpu`) become
    /// `whole` once per GPU, or with [`WholeGpus::FullProfile`] the full-GPU profile.
    pub fn map(&self, request: &GpuRequest, model: &ModelInfo, whole: WholeGpus) -> Vec<(String, u32)> {
        let full =
            || model.full_profile().expect("cluster models always have a full-GPU profile").name.clone();
        match request {
            GpuRequest::Mig(items) => items
                .iter()
                .map(|(name, count)| match whole {
                    WholeGpus::FullProfile if name.eq_ignore_ascii_case(WHOLE) => (full(), *count),
                    _ => (name.clone(), *count),
                })
                .collect(),
            GpuRequest::Share { num_gpu, gpu_milli } if *gpu_milli >= 1000 && whole == WholeGpus::Whole => {
                vec![(WHOLE.to_string(), *num_gpu)]
            }
            GpuRequest::Share { num_gpu, gpu_milli } => {
                vec![(self.profile_for_share(model, *gpu_milli).name.clone(), *num_gpu)]
            }
        }
    }
}

/// What the mapping did to a trace, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MappingSummary {
    /// Pods with a share below one GPU, by the profile they got.
    pub shares: BTreeMap<String, usize>,
    /// Pods asking for whole GPUs (`gpu_milli` 1000), and how many of those ask for more than one.
    pub whole_gpu_pods: usize,
    pub multi_gpu_pods: usize,
    /// Shares that only the full-GPU profile can hold (no profile between 4 and 7 slices).
    pub shares_needing_full_gpu: usize,
    /// Pods that asked for MIG profiles by name.
    pub mig_pods: usize,
}

impl MappingSummary {
    pub fn record(&mut self, request: &GpuRequest, mapped: &[(String, u32)], full: &str) {
        match request {
            GpuRequest::Mig(_) => self.mig_pods += 1,
            GpuRequest::Share { num_gpu, gpu_milli } if *gpu_milli >= 1000 => {
                self.whole_gpu_pods += 1;
                self.multi_gpu_pods += usize::from(*num_gpu > 1);
            }
            GpuRequest::Share { .. } => {
                let name = mapped.first().map(|(n, _)| n.clone()).unwrap_or_default();
                self.shares_needing_full_gpu += usize::from(name == full);
                *self.shares.entry(name).or_default() += 1;
            }
        }
    }

    pub fn describe(&self, mapping: &Mapping, whole: WholeGpus, model: &str) -> String {
        let shares: Vec<String> = self.shares.iter().map(|(p, n)| format!("{p}: {n}")).collect();
        let mut text = format!(
            "mapping {mapping} onto {model}: {} shared-GPU pods -> {}",
            self.shares.values().sum::<usize>(),
            if shares.is_empty() { "none".into() } else { shares.join(", ") }
        );
        if self.shares_needing_full_gpu > 0 {
            text.push_str(&format!(" ({} shares need the full-GPU profile)", self.shares_needing_full_gpu));
        }
        let as_what = match whole {
            WholeGpus::Whole => "asking for GPUs with MIG off (--whole-gpus whole)",
            WholeGpus::FullProfile => "mapped to the full-GPU profile per GPU (--whole-gpus full-profile)",
        };
        text.push_str(&format!(
            "; {} pods need whole GPUs ({} of them more than one), {as_what}",
            self.whole_gpu_pods, self.multi_gpu_pods
        ));
        if self.mig_pods > 0 {
            text.push_str(&format!("; {} pods ask for MIG profiles directly", self.mig_pods));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::a100;

    fn name(mapping: Mapping, milli: u32) -> String {
        mapping.profile_for_share(&a100(), milli).name.clone()
    }

    #[test]
    fn compute_rounds_up_to_the_next_profile() {
        // Boundaries at k/7 of 1000: 142 is 0.994 slices, 143 is 1.001.
        assert_eq!(name(Mapping::Compute, 142), "1g.10gb");
        assert_eq!(name(Mapping::Compute, 143), "2g.20gb");
        assert_eq!(name(Mapping::Compute, 320), "3g.40gb");
        assert_eq!(name(Mapping::Compute, 470), "4g.40gb");
        assert_eq!(name(Mapping::Compute, 571), "4g.40gb");
        // No 5g or 6g profile: 590 (4.13 slices) needs the whole GPU.
        assert_eq!(name(Mapping::Compute, 590), "7g.80gb");
        assert_eq!(name(Mapping::Compute, 1000), "7g.80gb");
    }

    #[test]
    fn memory_rounds_up_by_memory_and_prefers_less_compute() {
        assert_eq!(name(Mapping::Memory, 125), "1g.10gb");
        assert_eq!(name(Mapping::Memory, 126), "1g.20gb");
        assert_eq!(name(Mapping::Memory, 470), "3g.40gb");
        assert_eq!(name(Mapping::Memory, 501), "7g.80gb");
        // 810 of a 32 GiB GPU is 25.9 GiB: a 40 GB slice is enough.
        assert_eq!(name(Mapping::MemoryOf { gib: 32 }, 810), "3g.40gb");
        assert_eq!(name(Mapping::MemoryOf { gib: 16 }, 470), "1g.10gb");
    }

    #[test]
    fn whole_gpus_map_per_gpu() {
        let req = GpuRequest::Share { num_gpu: 8, gpu_milli: 1000 };
        let full = Mapping::Memory.map(&req, &a100(), WholeGpus::FullProfile);
        assert_eq!(full, vec![("7g.80gb".to_string(), 8)]);
        assert_eq!(Mapping::Memory.map(&req, &a100(), WholeGpus::Whole), vec![("whole".to_string(), 8)]);
        let mut summary = MappingSummary::default();
        summary.record(&req, &full, "7g.80gb");
        assert_eq!((summary.whole_gpu_pods, summary.multi_gpu_pods), (1, 1));
    }

    #[test]
    fn only_whole_gpu_requests_become_whole() {
        // A share that needs the full-GPU profile is still a share: it stays MIG.
        let share = GpuRequest::Share { num_gpu: 1, gpu_milli: 810 };
        assert_eq!(Mapping::Compute.map(&share, &a100(), WholeGpus::Whole), vec![("7g.80gb".to_string(), 1)]);
        // A trace naming the whole profile gets the full-GPU profile under full-profile.
        let named = GpuRequest::Mig(vec![("whole".into(), 2), ("1g.10gb".into(), 1)]);
        assert_eq!(
            Mapping::Compute.map(&named, &a100(), WholeGpus::FullProfile),
            vec![("7g.80gb".to_string(), 2), ("1g.10gb".to_string(), 1)]
        );
        assert_eq!(Mapping::Compute.map(&named, &a100(), WholeGpus::Whole)[0], ("whole".to_string(), 2));
        assert_eq!("full-profile".parse::<WholeGpus>(), Ok(WholeGpus::FullProfile));
        assert_eq!(WholeGpus::default().to_string(), "whole");
        let e = "mig-off".parse::<WholeGpus>().unwrap_err();
        assert!(e.contains("\"mig-off\""), "{e}");
    }

    #[test]
    fn parses_and_rejects() {
        assert_eq!("memory:32".parse::<Mapping>().unwrap(), Mapping::MemoryOf { gib: 32 });
        let e = "share".parse::<Mapping>().unwrap_err();
        assert!(e.contains("\"share\""), "{e}");
    }
}
