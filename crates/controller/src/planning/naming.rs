//! Names of the objects the controller creates.

use jiff::Timestamp;

use crate::planning::fingerprint::Fingerprint;

/// Longest plan name: 63 keeps it usable as a label value (events, selectors) and readable in
/// `kubectl get`.
const MAX_NAME: usize = 63;

/// `<policy>-<yyyymmdd-hhmmss>-<6 hex digits of the input fingerprint>`, UTC. The time orders
/// plans for a reader; the hash tells two plans of the same second apart and shows at a glance
/// that two plans were made for the same world. A long policy name is shortened to fit.
pub(crate) fn plan_name(policy: &str, at: Timestamp, input: Fingerprint) -> String {
    let suffix = format!("-{}-{}", at.strftime("%Y%m%d-%H%M%S"), input.short(6));
    let room = MAX_NAME - suffix.len();
    let mut prefix: String = policy.chars().take(room).collect();
    // A DNS-1123 name must start and end with an alphanumeric character.
    while prefix.ends_with(['-', '.']) {
        prefix.pop();
    }
    if prefix.is_empty() {
        prefix.push_str("plan");
    }
    format!("{prefix}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_policy_time_and_hash() {
        let at: Timestamp = "2025-03-04T05:06:07Z".parse().unwrap();
        let fp = Fingerprint::from_raw(0x3fa9_c2de_0000_0001);
        assert_eq!(plan_name("gpu-pool", at, fp), "gpu-pool-20250304-050607-3fa9c2");
    }

    #[test]
    fn long_policy_names_are_cut_to_a_valid_name() {
        let at: Timestamp = "2025-03-04T05:06:07Z".parse().unwrap();
        let fp = Fingerprint::from_raw(1);
        let long = format!("{}-{}", "a".repeat(39), "b".repeat(30));
        let name = plan_name(&long, at, fp);
        // Cut to 40 characters, then the dangling '-' goes.
        assert_eq!(name, format!("{}-20250304-050607-000000", "a".repeat(39)));
        assert_eq!(plan_name(&"c".repeat(100), at, fp).len(), 63);
        assert_eq!(plan_name("-", at, fp), "plan-20250304-050607-000000");
    }
}
