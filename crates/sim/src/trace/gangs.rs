//! Gangs in traces: the checks every reader applies, multi-GPU pods split into gangs of one-GPU
//! workers, and jobs (a gang's members together) for the load mode.

use std::collections::{BTreeMap, HashMap};

use super::{GangRef, GpuRequest, Trace, TraceError, TracePod};
use geometer_solver::words::quoted;

/// Every gang's members agree on its minimum, and the minimum is between 1 and its members.
pub(crate) fn check(file: &str, pods: &[TracePod]) -> Result<(), TraceError> {
    let mut gangs: BTreeMap<&str, (usize, Option<u32>)> = BTreeMap::new();
    for pod in pods {
        let Some(gang) = &pod.gang else { continue };
        let entry = gangs.entry(gang.name.as_str()).or_insert((0, gang.min_members));
        entry.0 += 1;
        if gang.min_members.is_some() && entry.1.is_some() && gang.min_members != entry.1 {
            return Err(invalid(
                file,
                format!(
                    "gang {}: its members give different gang_min ({} and {})",
                    quoted(&gang.name),
                    entry.1.unwrap_or_default(),
                    gang.min_members.unwrap_or_default()
                ),
            ));
        }
        entry.1 = entry.1.or(gang.min_members);
    }
    for (name, (members, min)) in gangs {
        match min {
            Some(0) => {
                return Err(invalid(file, format!("gang {}: gang_min must be at least 1", quoted(name))))
            }
            Some(min) if min as usize > members => {
                return Err(invalid(
                    file,
                    format!("gang {}: gang_min is {min} but the trace has {members} members", quoted(name)),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

fn invalid(file: &str, reason: String) -> TraceError {
    TraceError::Invalid { file: file.into(), reason }
}

/// Pods asking for k > 1 whole GPUs (`num_gpu` k, `gpu_milli` 1000) and in no gang become gangs
/// of k workers of one GPU each, all of which must start together (the data-parallel job such a
/// pod usually runs, one worker per GPU, as a PyTorchJob or an MPIJob would run it across nodes).
/// Each worker gets an equal share of the pod's CPU and memory (rounded up) and everything else
/// the pod has; worker `i` of pod `p` is `p-w<i>`, in gang `p`.
pub fn split_multi_gpu(trace: &Trace) -> Trace {
    let mut out = Trace { pods: Vec::with_capacity(trace.pods.len()), notes: trace.notes.clone() };
    let (mut split, mut workers) = (0usize, 0usize);
    for pod in &trace.pods {
        let GpuRequest::Share { num_gpu, gpu_milli: 1000 } = pod.request else {
            out.pods.push(pod.clone());
            continue;
        };
        if num_gpu < 2 || pod.gang.is_some() {
            out.pods.push(pod.clone());
            continue;
        }
        split += 1;
        workers += num_gpu as usize;
        let share = |total: u64| total.div_ceil(u64::from(num_gpu));
        for i in 0..num_gpu {
            out.pods.push(TracePod {
                name: format!("{}-w{i}", pod.name),
                request: GpuRequest::Share { num_gpu: 1, gpu_milli: 1000 },
                cpu_milli: share(pod.cpu_milli),
                memory_mib: share(pod.memory_mib),
                gang: Some(GangRef { name: pod.name.clone(), min_members: Some(num_gpu) }),
                ..pod.clone()
            });
        }
    }
    out.notes.push(format!(
        "--multi-gpu-gangs: {split} pods asking for more than one whole GPU became gangs of one-GPU workers ({workers} workers), each gang started only when all its workers hold a GPU"
    ));
    out
}

/// The trace's jobs in order of their first pod: a gang's members together, every other pod
/// alone. Indices into `pods`.
pub(crate) fn jobs(pods: &[TracePod]) -> Vec<Vec<usize>> {
    let mut jobs: Vec<Vec<usize>> = Vec::new();
    let mut gang_job: HashMap<&str, usize> = HashMap::new();
    for (i, pod) in pods.iter().enumerate() {
        match &pod.gang {
            Some(gang) => match gang_job.get(gang.name.as_str()) {
                Some(&j) => jobs[j].push(i),
                None => {
                    gang_job.insert(&gang.name, jobs.len());
                    jobs.push(vec![i]);
                }
            },
            None => jobs.push(vec![i]),
        }
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, num_gpu: u32, gang: Option<(&str, Option<u32>)>) -> TracePod {
        TracePod {
            name: name.into(),
            arrival: 5_000,
            duration: Some(60_000),
            request: GpuRequest::Share { num_gpu, gpu_milli: 1000 },
            cpu_milli: 10_000,
            memory_mib: 3_000,
            priority: 0,
            gpu_models: vec!["H100-80GB".into()],
            nodes: vec![],
            do_not_disrupt: true,
            gang: gang.map(|(n, min)| GangRef { name: n.into(), min_members: min }),
        }
    }

    #[test]
    fn a_pod_of_three_gpus_becomes_a_gang_of_three_one_gpu_workers() {
        let trace = Trace { pods: vec![pod("big", 3, None), pod("one", 1, None)], notes: vec![] };
        let out = split_multi_gpu(&trace);
        let names: Vec<&str> = out.pods.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["big-w0", "big-w1", "big-w2", "one"]);
        for w in &out.pods[..3] {
            assert_eq!(w.request, GpuRequest::Share { num_gpu: 1, gpu_milli: 1000 });
            assert_eq!((w.cpu_milli, w.memory_mib), (3_334, 1_000));
            assert_eq!(w.gang, Some(GangRef { name: "big".into(), min_members: Some(3) }));
            assert_eq!((w.arrival, w.duration, w.do_not_disrupt), (5_000, Some(60_000), true));
            assert_eq!(w.gpu_models, ["H100-80GB"]);
        }
        assert_eq!(out.pods[3], trace.pods[1]);
        assert!(out.notes[0].contains("1 pods") && out.notes[0].contains("3 workers"), "{:?}", out.notes);
    }

    #[test]
    fn members_must_agree_on_a_minimum_they_can_reach() {
        let ok = [pod("a", 1, Some(("g", Some(2)))), pod("b", 1, Some(("g", None)))];
        assert!(check("t", &ok).is_ok());
        let split = [pod("a", 1, Some(("g", Some(2)))), pod("b", 1, Some(("g", Some(1))))];
        assert!(check("t", &split).unwrap_err().to_string().contains("different gang_min"));
        let short = [pod("a", 1, Some(("g", Some(3)))), pod("b", 1, Some(("g", None)))];
        assert!(check("t", &short).unwrap_err().to_string().contains("has 2 members"));
    }

    #[test]
    fn a_gang_is_one_job_wherever_its_members_are() {
        let pods = [pod("a", 1, Some(("g", None))), pod("b", 1, None), pod("c", 1, Some(("g", None)))];
        assert_eq!(jobs(&pods), vec![vec![0, 2], vec![1]]);
    }
}
