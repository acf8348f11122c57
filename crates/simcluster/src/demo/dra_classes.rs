//! The demo on DRA nodes: the workload asks for `nvidia.com/mig-<profile>` and `nvidia.com/gpu`
//! as it does on device-plugin nodes, and a DeviceClass per profile maps each of those names to
//! the DRA driver's devices (`extendedResourceName`, GA in Kubernetes 1.37), so kube-scheduler
//! serves them from the driver's ResourceSlices and the pods stay unchanged.

use k8s_openapi::api::resource::v1::DeviceClass;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

use super::{DemoError, Scenario};
use geometer_solver::catalog::WHOLE;

/// A DeviceClass serving `resource` with the DRA driver's devices `selector` matches.
fn class(name: &str, resource: &str, selector: &str) -> DeviceClass {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "extendedResourceName": resource,
            "selectors": [{"cel": {"expression": format!("device.driver == 'gpu.nvidia.com' && {selector}")}}],
        },
    }))
    .expect("a DeviceClass")
}

/// The class for each profile the scenario's workload asks for: `mig-<profile>` for a MIG
/// profile, `gpu-whole` for a whole GPU.
pub(super) fn classes(scenario: &Scenario) -> Vec<DeviceClass> {
    let mut profiles: Vec<&str> =
        scenario.phases.iter().flat_map(|p| p.mix.iter().map(|(profile, _)| *profile)).collect();
    profiles.sort_unstable();
    profiles.dedup();
    profiles
        .into_iter()
        .map(|profile| match profile {
            WHOLE => {
                class("gpu-whole", "nvidia.com/gpu", "device.attributes['gpu.nvidia.com'].type == 'gpu'")
            }
            mig => class(
                &format!("mig-{mig}"),
                &format!("nvidia.com/mig-{mig}"),
                // `type` first: a whole GPU has no `profile`, and a selector that fails on any
                // device fails the pod's scheduling, where `false && ...` skips the rest.
                &format!(
                    "device.attributes['gpu.nvidia.com'].type == 'mig' && device.attributes['gpu.nvidia.com'].profile == '{mig}'"
                ),
            ),
        })
        .collect()
}

/// Creates the scenario's DeviceClasses (one left from an earlier run is kept).
pub(super) async fn create(client: &kube::Client, scenario: &Scenario) -> Result<(), DemoError> {
    let api: Api<DeviceClass> = Api::all(client.clone());
    for class in classes(scenario) {
        match api.create(&PostParams::default(), &class).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                let name = class.metadata.name.unwrap_or_default();
                return Err(DemoError::Setup(format!("cannot create DeviceClass {name}: {e}")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn each_profile_of_the_workload_gets_a_class_naming_its_extended_resource() {
        let scenario = Scenario::default_with(2, Duration::ZERO);
        let classes = classes(&scenario);
        let mapped: Vec<(String, String)> = classes
            .iter()
            .map(|c| {
                (
                    c.metadata.name.clone().unwrap(),
                    c.spec.as_ref().unwrap().extended_resource_name.clone().unwrap(),
                )
            })
            .collect();
        assert!(mapped.contains(&("gpu-whole".into(), "nvidia.com/gpu".into())), "{mapped:?}");
        assert!(mapped.contains(&("mig-1g.10gb".into(), "nvidia.com/mig-1g.10gb".into())), "{mapped:?}");
        let asked: std::collections::BTreeSet<&str> =
            scenario.phases.iter().flat_map(|p| p.mix.iter().map(|(profile, _)| *profile)).collect();
        assert_eq!(classes.len(), asked.len());
    }
}
