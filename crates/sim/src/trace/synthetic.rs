//! Synthetic traces in Geometer's format: Poisson arrivals, exponential lifetimes, a weighted
//! mix of MIG requests, and optionally multi-worker jobs (gangs). For examples, tests and the
//! replay benchmark; never derived from the Alibaba data.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{GangRef, GpuRequest, Millis, Trace, TracePod};

#[derive(Debug, Clone, PartialEq)]
pub struct Synthetic {
    pub pods: usize,
    pub seed: u64,
    pub mean_interarrival_s: f64,
    pub mean_duration_s: f64,
    /// Requests and their weights, e.g. `([("3g.40gb", 1)], 0.2)`.
    pub mix: Vec<(Vec<(String, u32)>, f64)>,
    /// Share of pods marked do-not-disrupt.
    pub do_not_disrupt: f64,
    /// Share of pods with priority 1 (others 0).
    pub high_priority: f64,
    /// Multi-worker jobs among the single pods; `None`: single pods only.
    pub gangs: Option<GangMix>,
}

/// Jobs of several workers that must all start together (a gang): each worker asks for the
/// same one slice, and the workers arrive together and run equally long.
#[derive(Debug, Clone, PartialEq)]
pub struct GangMix {
    /// Share of jobs that are gangs.
    pub share: f64,
    /// Workers per gang, drawn uniformly from this range (inclusive).
    pub workers: (u32, u32),
    /// The profile a gang's workers ask for, drawn uniformly.
    pub profiles: Vec<String>,
}

impl GangMix {
    /// Data-parallel jobs of 2-8 workers on small and medium slices of 80 GB GPUs.
    pub fn small_slices_80gb(share: f64) -> Self {
        GangMix {
            share,
            workers: (2, 8),
            profiles: ["1g.10gb", "2g.20gb", "3g.40gb"].map(String::from).to_vec(),
        }
    }
}

impl Synthetic {
    /// A mix for 80 GB A100/H100 GPUs: mostly small slices, some halves, a few whole GPUs.
    pub fn mig_80gb(pods: usize, seed: u64) -> Self {
        let one = |p: &str| vec![(p.to_string(), 1)];
        Synthetic {
            pods,
            seed,
            mean_interarrival_s: 10.0,
            mean_duration_s: 1800.0,
            mix: vec![
                (one("1g.10gb"), 0.30),
                (vec![("1g.10gb".to_string(), 2)], 0.05),
                (one("1g.20gb"), 0.05),
                (one("2g.20gb"), 0.20),
                (one("3g.40gb"), 0.20),
                (one("4g.40gb"), 0.10),
                (one("7g.80gb"), 0.10),
            ],
            do_not_disrupt: 0.3,
            high_priority: 0.1,
            gangs: None,
        }
    }

    /// The same mix, with this share of jobs gangs of 2-8 workers ([`GangMix::small_slices_80gb`]).
    pub fn with_gangs(self, share: f64) -> Self {
        Synthetic { gangs: Some(GangMix::small_slices_80gb(share)), ..self }
    }

    /// `pods` pods; a gang drawn last is cut to the pods left (a gang of one is a pod alone).
    pub fn generate(&self) -> Trace {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut now = 0.0f64;
        let width = self.pods.max(1).to_string().len();
        let mut pods: Vec<TracePod> = Vec::with_capacity(self.pods);
        let mut gangs = 0usize;
        while pods.len() < self.pods {
            if !pods.is_empty() {
                now += exponential(&mut rng, self.mean_interarrival_s);
            }
            let first = pods.len();
            let name = |i: usize| format!("pod-{i:0width$}");
            let arrival = (now * 1000.0).round() as Millis;
            match self.draw_gang(&mut rng, self.pods - first) {
                Some((workers, profile)) => {
                    let job = self.job(&mut rng, arrival, vec![(profile, 1)]);
                    let gang = (workers > 1).then(|| GangRef {
                        name: format!("gang-{first:0width$}"),
                        min_members: Some(workers),
                    });
                    gangs += usize::from(gang.is_some());
                    for i in first..first + workers as usize {
                        pods.push(TracePod { name: name(i), gang: gang.clone(), ..job.clone() });
                    }
                }
                None => {
                    let request = self.draw_request(&mut rng);
                    pods.push(TracePod { name: name(first), ..self.job(&mut rng, arrival, request) });
                }
            }
        }
        let mut notes = vec![format!("synthetic trace: {} pods, seed {}", self.pods, self.seed)];
        if let Some(mix) = &self.gangs {
            notes.push(format!(
                "{gangs} gangs of {}-{} workers ({}; {:.0}% of jobs)",
                mix.workers.0,
                mix.workers.1,
                mix.profiles.join(", "),
                mix.share * 100.0
            ));
        }
        Trace { pods, notes }
    }

    /// With gangs in the mix, whether this job is one: its workers (at most `left`) and their
    /// profile. Draws nothing without gangs, so such traces are as before gangs existed.
    fn draw_gang(&self, rng: &mut ChaCha8Rng, left: usize) -> Option<(u32, String)> {
        let mix = self.gangs.as_ref()?;
        if rng.random::<f64>() >= mix.share || mix.profiles.is_empty() {
            return None;
        }
        let (low, high) = (mix.workers.0.max(1), mix.workers.1.max(mix.workers.0.max(1)));
        let workers = rng.random_range(low..=high).min(left as u32);
        let profile = mix.profiles[rng.random_range(0..mix.profiles.len())].clone();
        Some((workers, profile))
    }

    fn draw_request(&self, rng: &mut ChaCha8Rng) -> Vec<(String, u32)> {
        let total: f64 = self.mix.iter().map(|(_, w)| w).sum();
        let mut pick = rng.random::<f64>() * total;
        self.mix
            .iter()
            .find(|(_, w)| {
                pick -= w;
                pick < 0.0
            })
            .or(self.mix.last())
            .map(|(r, _)| r.clone())
            .unwrap_or_default()
    }

    /// One pod of a job asking for `request`, unnamed: lifetime, CPU and memory, priority.
    fn job(&self, rng: &mut ChaCha8Rng, arrival: Millis, request: Vec<(String, u32)>) -> TracePod {
        let gpus: u32 = request.iter().map(|(_, c)| c).sum();
        let duration = exponential(rng, self.mean_duration_s).max(1.0);
        TracePod {
            name: String::new(),
            arrival,
            duration: Some((duration * 1000.0).round() as Millis),
            request: GpuRequest::Mig(request),
            cpu_milli: 2000 * u64::from(gpus),
            memory_mib: 8192 * u64::from(gpus),
            priority: i32::from(rng.random::<f64>() < self.high_priority),
            gpu_models: Vec::new(),
            nodes: Vec::new(),
            do_not_disrupt: rng.random::<f64>() < self.do_not_disrupt,
            gang: None,
        }
    }
}

fn exponential(rng: &mut ChaCha8Rng, mean: f64) -> f64 {
    let u: f64 = rng.random::<f64>();
    -mean * (1.0 - u).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_trace() {
        let a = Synthetic::mig_80gb(50, 7).generate();
        assert_eq!(a, Synthetic::mig_80gb(50, 7).generate());
        assert_ne!(a.pods, Synthetic::mig_80gb(50, 8).generate().pods);
        assert!(a.pods.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        assert_eq!(a.pods[0].arrival, 0);
    }

    #[test]
    fn gangs_arrive_together_with_one_profile_and_lifetime() {
        let t = Synthetic::mig_80gb(200, 7).with_gangs(0.4).generate();
        assert_eq!(t.pods.len(), 200);
        assert_eq!(t, Synthetic::mig_80gb(200, 7).with_gangs(0.4).generate());
        let mut gangs: std::collections::BTreeMap<&str, Vec<&TracePod>> = Default::default();
        for p in &t.pods {
            if let Some(g) = &p.gang {
                gangs.entry(&g.name).or_default().push(p);
            }
        }
        assert!(gangs.len() > 10, "{}", gangs.len());
        for members in gangs.values() {
            let first = members[0];
            assert!((2..=8).contains(&members.len()));
            assert_eq!(first.gang.as_ref().unwrap().min_members, Some(members.len() as u32));
            assert!(members
                .iter()
                .all(|m| (m.arrival, m.duration, &m.request)
                    == (first.arrival, first.duration, &first.request)));
        }
        assert!(t.pods.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    }
}
