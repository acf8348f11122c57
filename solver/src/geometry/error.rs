//! Why a geometry or a geometry spec is not acceptable.

use thiserror::Error;

use crate::words::quoted;

/// Every message names the profile, start and value involved and, where there is one, the
/// legal choice, so that a user can fix the spec without reading the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GeometryError {
    #[error("geometry spec is empty: give instances like `3g.20gb@4,1g.5gb`")]
    EmptySpec,

    #[error("token {} in geometry spec is malformed: {reason}", quoted(token))]
    MalformedToken { token: String, reason: String },

    #[error(
        "profile {} (token {}) is not a profile of {model}; known profiles: {known}",
        quoted(value),
        quoted(token)
    )]
    UnknownProfile { model: String, token: String, value: String, known: String },

    #[error("profile id {id} does not exist on {model} (it has {count} profiles)")]
    UnknownProfileId { model: String, id: usize, count: usize },

    #[error("{profile}@{start}: start {start} is not a legal placement on {model}; legal starts: {legal:?}")]
    IllegalStart { model: String, profile: String, start: u8, legal: Vec<u8> },

    #[error(
        "{first}@{first_start} and {second}@{second_start} overlap on placement units {units:?}; \
         instances must cover disjoint units"
    )]
    Overlap { first: String, first_start: u8, second: String, second_start: u8, units: Vec<u8> },

    #[error("{count} instances of {profile} on {model}; at most {max} fit")]
    TooManyInstances { model: String, profile: String, count: usize, max: u8 },

    #[error(
        "{count} instances from the group [{profiles}] on {model}; at most {max} together \
         (they share one engine)"
    )]
    GroupLimit { model: String, profiles: String, count: usize, max: u8 },

    #[error("{profile}@{start} cannot share the GPU with {other}@{other_start}; it only coexists with [{allowed}]")]
    Incompatible { profile: String, start: u8, other: String, other_start: u8, allowed: String },

    #[error("{engine} engines: the instances need {used}, {model} has {total}")]
    EngineTotals { model: String, engine: String, used: u32, total: u8 },

    #[error("compute slices: the instances need {used}, {model} has {total}")]
    ComputeSlices { model: String, used: u32, total: u8 },

    #[error("no legal placement of {wanted} on {model}{fixed}: {reason}")]
    NoPlacement { model: String, wanted: String, fixed: String, reason: String },
}
