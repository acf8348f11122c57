//! Geometry specs as users write them: `3g.20gb@4,2g.10gb@0,1g.5gb` (`@start` optional),
//! with `3x1g.5gb` as shorthand for three unplaced `1g.5gb`.

use crate::catalog::{GpuModel, ProfileId};

use super::{place, validate, Geometry, GeometryError, Placed};
use crate::words::quoted;

/// A parsed spec: instances with a start where the user gave one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeometrySpec {
    pub items: Vec<(ProfileId, Option<u8>)>,
}

impl GeometrySpec {
    /// Instances with a start.
    pub fn fixed(&self) -> Geometry {
        self.items.iter().filter_map(|&(p, s)| s.map(|s| Placed::new(p, s))).collect()
    }

    /// Profiles still to be placed.
    pub fn unplaced(&self) -> Vec<ProfileId> {
        self.items.iter().filter(|(_, s)| s.is_none()).map(|&(p, _)| p).collect()
    }

    /// The geometry this spec describes: the placed instances validated as they are, the
    /// unplaced ones put where they fit next to them.
    pub fn resolve(&self, model: &GpuModel) -> Result<Geometry, GeometryError> {
        let fixed = self.fixed();
        let unplaced = self.unplaced();
        if unplaced.is_empty() {
            validate(model, &fixed)?;
            return Ok(fixed);
        }
        place(model, &fixed, &unplaced)
    }
}

const MAX_REPEAT: usize = 64;

/// Parses a comma-separated spec. Profiles are looked up by canonical name or alias.
pub fn parse_spec(model: &GpuModel, spec: &str) -> Result<GeometrySpec, GeometryError> {
    let mut items = Vec::new();
    let tokens: Vec<&str> = spec.split(',').map(str::trim).collect();
    if tokens.iter().all(|t| t.is_empty()) {
        return Err(GeometryError::EmptySpec);
    }
    for token in tokens {
        if token.is_empty() {
            return Err(malformed(token, "empty entry (two commas in a row or a trailing comma)"));
        }
        let (repeat, rest) = split_repeat(token)?;
        let (name, start) = match rest.split_once('@') {
            Some((name, start)) => (name.trim(), Some(parse_start(token, start.trim())?)),
            None => (rest.trim(), None),
        };
        if name.is_empty() {
            return Err(malformed(token, "missing profile name before '@'"));
        }
        if repeat > 1 && start.is_some() {
            return Err(malformed(
                token,
                "a repeat count and an @start together would overlap; list each start",
            ));
        }
        let profile = model.profile(name).ok_or_else(|| GeometryError::UnknownProfile {
            model: model.key.clone(),
            token: token.to_string(),
            value: name.to_string(),
            known: model.profiles.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
        })?;
        items.extend(std::iter::repeat_n((profile, start), repeat));
    }
    Ok(GeometrySpec { items })
}

/// `3x1g.5gb` -> (3, "1g.5gb"); `1g.5gb` -> (1, "1g.5gb").
fn split_repeat(token: &str) -> Result<(usize, &str), GeometryError> {
    let digits = token.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &token[digits..];
    // "1g.5gb" starts with digits too; only an 'x' right after them makes a count.
    let Some(after) = rest.strip_prefix(['x', 'X', '*']) else {
        return Ok((1, token));
    };
    if digits == 0 {
        return Err(malformed(token, "a repeat needs a number, e.g. 3x1g.5gb"));
    }
    let count: usize = token[..digits]
        .parse()
        .ok()
        .filter(|&n| (1..=MAX_REPEAT).contains(&n))
        .ok_or_else(|| malformed(token, &format!("repeat count must be 1..={MAX_REPEAT}")))?;
    Ok((count, after))
}

fn parse_start(token: &str, start: &str) -> Result<u8, GeometryError> {
    if start.is_empty() {
        return Err(malformed(token, "missing start after '@', e.g. 3g.20gb@4"));
    }
    start.parse::<u8>().map_err(|_| {
        malformed(token, &format!("start {} is not a placement unit number (0-255)", quoted(start)))
    })
}

fn malformed(token: &str, reason: &str) -> GeometryError {
    GeometryError::MalformedToken { token: token.to_string(), reason: reason.to_string() }
}
