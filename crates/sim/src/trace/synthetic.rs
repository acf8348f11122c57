//! Synthetic traces in Geometer's format: Poisson arrivals, exponential lifetimes, a weighted
//! mix of MIG requests. For examples, tests and the replay benchmark; never derived from the
//! Alibaba data.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{GpuRequest, Millis, Trace, TracePod};

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
        }
    }

    pub fn generate(&self) -> Trace {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let total: f64 = self.mix.iter().map(|(_, w)| w).sum();
        let mut now = 0.0f64;
        let width = self.pods.max(1).to_string().len();
        let pods = (0..self.pods)
            .map(|i| {
                if i > 0 {
                    now += exponential(&mut rng, self.mean_interarrival_s);
                }
                let mut pick = rng.random::<f64>() * total;
                let request = self
                    .mix
                    .iter()
                    .find(|(_, w)| {
                        pick -= w;
                        pick < 0.0
                    })
                    .or(self.mix.last())
                    .map(|(r, _)| r.clone())
                    .unwrap_or_default();
                let gpus: u32 = request.iter().map(|(_, c)| c).sum();
                let duration = exponential(&mut rng, self.mean_duration_s).max(1.0);
                TracePod {
                    name: format!("pod-{i:0width$}"),
                    arrival: (now * 1000.0).round() as Millis,
                    duration: Some((duration * 1000.0).round() as Millis),
                    request: GpuRequest::Mig(request),
                    cpu_milli: 2000 * u64::from(gpus),
                    memory_mib: 8192 * u64::from(gpus),
                    priority: i32::from(rng.random::<f64>() < self.high_priority),
                    gpu_models: Vec::new(),
                    nodes: Vec::new(),
                    do_not_disrupt: rng.random::<f64>() < self.do_not_disrupt,
                }
            })
            .collect();
        Trace { pods, notes: vec![format!("synthetic trace: {} pods, seed {}", self.pods, self.seed)] }
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
}
