//! The extended resources of NVIDIA's device plugin, as Geometer names them.
//!
//! With the mixed MIG strategy the device plugin advertises each MIG profile as its own
//! resource, `nvidia.com/mig-<profile>` (NVIDIA/k8s-device-plugin, `internal/rm/rm.go` and the
//! "MIG strategies" section of its README), and a GPU with MIG off as `nvidia.com/gpu`.

/// The prefix of every MIG slice resource: `nvidia.com/mig-1g.10gb`.
pub const MIG_RESOURCE_PREFIX: &str = "nvidia.com/mig-";

/// The resource of a whole GPU (MIG off).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// `nvidia.com/mig-<profile>` for a profile name.
pub fn mig_resource(profile: &str) -> String {
    format!("{MIG_RESOURCE_PREFIX}{profile}")
}

/// The resource a device of `profile` is advertised as: `nvidia.com/gpu` for the whole GPU
/// (the planner's profile `whole`), else `nvidia.com/mig-<profile>`.
pub fn device_resource(profile: &str) -> String {
    if profile == geometer_solver::catalog::WHOLE {
        return GPU_RESOURCE.to_string();
    }
    mig_resource(profile)
}

/// The planner's profile of a device resource: `nvidia.com/mig-1g.10gb` -> `1g.10gb`,
/// `nvidia.com/gpu` -> `whole`; `None` for any other resource.
pub fn device_profile(resource: &str) -> Option<&str> {
    if resource == GPU_RESOURCE {
        return Some(geometer_solver::catalog::WHOLE);
    }
    mig_profile(resource)
}

/// The profile of a MIG slice resource (`nvidia.com/mig-1g.10gb` -> `1g.10gb`), `None` for any
/// other resource.
pub fn mig_profile(resource: &str) -> Option<&str> {
    resource.strip_prefix(MIG_RESOURCE_PREFIX)
}

/// Whether `resource` is a MIG slice.
pub fn is_mig_resource(resource: &str) -> bool {
    resource.starts_with(MIG_RESOURCE_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_profiles_round_trip() {
        assert_eq!(mig_resource("1g.10gb"), "nvidia.com/mig-1g.10gb");
        assert_eq!(mig_profile("nvidia.com/mig-3g.40gb"), Some("3g.40gb"));
        assert_eq!(mig_profile(GPU_RESOURCE), None);
        assert!(!is_mig_resource("cpu"));
        assert_eq!(device_resource("whole"), GPU_RESOURCE);
        assert_eq!(device_profile(GPU_RESOURCE), Some("whole"));
        assert_eq!(device_profile(&device_resource("2g.20gb")), Some("2g.20gb"));
        assert_eq!(device_profile("cpu"), None);
    }
}
