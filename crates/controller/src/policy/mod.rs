//! MigPolicies: node selectors, validation beyond the CRD schema, and their status.

pub mod selector;
pub mod status;
pub mod validation;
