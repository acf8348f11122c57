//! MigPolicies: node selectors, validation beyond the CRD schema, and their status.

pub(crate) mod selector;
pub(crate) mod status;
pub(crate) mod validation;
