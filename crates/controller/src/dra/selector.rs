//! DRA device selectors: a DeviceClass's or a request's CEL expressions evaluated against a
//! device, as kube-scheduler's allocator evaluates them, with `kube-cel` (CEL as Kubernetes
//! extends it: `quantity`, `semver`, the string and list libraries).
//!
//! The environment follows Kubernetes' (repository `kubernetes/kubernetes`, path
//! `staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go`): one variable `device` with
//! `driver`, `attributes` and `capacity` (maps by domain, then by name; a name written without
//! a domain belongs to the driver's), and `allowMultipleAllocations`. Capacities are quantities,
//! version attributes semantic versions. Looking up a domain the device has nothing in gives
//! an empty map there, not an error; this module gives one for every domain the expression
//! names. An expression that fails on a device (a missing attribute) is an error: the allocator
//! then refuses the claim, and Geometer leaves the request unplanned rather than guess.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kube_cel::cel::objects::{Key, Map};
use kube_cel::cel::{Context, Program, Value};
use kube_cel::KubeCelExt;
use thiserror::Error;

/// A device attribute's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribute {
    String(String),
    Int(i64),
    Bool(bool),
    /// A semantic version, e.g. `8.0.0`.
    Version(String),
}

/// A device as a selector sees it. Attribute and capacity names are qualified
/// (`gpu.nvidia.com/profile`) or bare (the driver's domain).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CandidateDevice {
    pub driver: String,
    pub attributes: BTreeMap<String, Attribute>,
    /// Quantities as Kubernetes writes them (`40Gi`, `1`).
    pub capacity: BTreeMap<String, String>,
}

impl CandidateDevice {
    /// A device of a ResourceSlice of `driver`. List-valued attributes (`strings`, `ints`, ...)
    /// are left out: a selector reading one fails, and is reported, rather than guessed.
    pub fn from_slice(driver: &str, device: &k8s_openapi::api::resource::v1::Device) -> CandidateDevice {
        let attributes = device.attributes.iter().flatten().filter_map(|(name, a)| {
            let value = match (&a.string, a.int, a.bool, &a.version) {
                (Some(s), ..) => Attribute::String(s.clone()),
                (_, Some(i), ..) => Attribute::Int(i),
                (_, _, Some(b), _) => Attribute::Bool(b),
                (.., Some(v)) => Attribute::Version(v.clone()),
                _ => return None,
            };
            Some((name.clone(), value))
        });
        let capacity = device.capacity.iter().flatten().map(|(name, c)| (name.clone(), c.value.0.clone()));
        CandidateDevice {
            driver: driver.to_string(),
            attributes: attributes.collect(),
            capacity: capacity.collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SelectorError {
    #[error("CEL expression {expression} does not compile: {problem}")]
    Compile { expression: String, problem: String },
    #[error("CEL expression {expression} fails on device {device}: {problem}")]
    Evaluate { expression: String, device: String, problem: String },
    #[error("CEL expression {expression} gives {value}, not true or false")]
    NotBool { expression: String, value: String },
    #[error("device {device}: {name} {value} is not a {kind}")]
    Value { device: String, name: String, value: String, kind: &'static str },
}

/// One compiled selector.
pub struct Selector {
    expression: String,
    program: Program,
    /// `quantity(text)` and `semver(text)`: how capacities and version attributes become CEL
    /// values (kube-cel keeps their types to itself), compiled once.
    quantity: Program,
    semver: Program,
    /// The string literals of the expression: the domains it may look up.
    literals: Vec<String>,
}

/// Domain -> name -> value, as `device.attributes` and `device.capacity` hold them.
type ByDomain = BTreeMap<String, HashMap<Key, Value>>;

impl Selector {
    pub fn compile(expression: &str) -> Result<Selector, SelectorError> {
        let compile = |source: &str| {
            Program::compile(source).map_err(|e| SelectorError::Compile {
                expression: quoted(source),
                problem: first_line(&e.to_string()),
            })
        };
        Ok(Selector {
            expression: expression.to_string(),
            program: compile(expression)?,
            quantity: compile("quantity(text)")?,
            semver: compile("semver(text)")?,
            literals: string_literals(expression),
        })
    }

    /// Whether `device` (named `name` in errors) matches.
    pub fn matches(&self, name: &str, device: &CandidateDevice) -> Result<bool, SelectorError> {
        let mut context = Context::default().with_all();
        let value = self.device_value(&mut context, name, device)?;
        context.add_variable_from_value("device", value);
        let value = self.program.execute(&context).map_err(|e| SelectorError::Evaluate {
            expression: quoted(&self.expression),
            device: name.to_string(),
            problem: e.to_string(),
        })?;
        match value {
            Value::Bool(b) => Ok(b),
            other => Err(SelectorError::NotBool {
                expression: quoted(&self.expression),
                value: format!("{other:?}"),
            }),
        }
    }

    /// The `device` variable, its quantities and versions converted in `context`.
    fn device_value(
        &self,
        context: &mut Context,
        name: &str,
        device: &CandidateDevice,
    ) -> Result<Value, SelectorError> {
        let mut attributes = by_domain(&device.attributes, &device.driver, |qualified, attribute| {
            Ok(match attribute {
                Attribute::String(s) => Value::String(Arc::new(s.clone())),
                Attribute::Int(i) => Value::Int(*i),
                Attribute::Bool(b) => Value::Bool(*b),
                Attribute::Version(v) => {
                    convert(context, &self.semver, name, qualified, v, "semantic version")?
                }
            })
        })?;
        let mut capacity = by_domain(&device.capacity, &device.driver, |qualified, quantity| {
            convert(context, &self.quantity, name, qualified, quantity, "quantity")
        })?;
        for domain in &self.literals {
            attributes.entry(domain.clone()).or_default();
            capacity.entry(domain.clone()).or_default();
        }
        let as_value = |maps: ByDomain| {
            map(maps
                .into_iter()
                .map(|(domain, entries)| (key_of(&domain), Value::Map(Map { map: Arc::new(entries) }))))
        };
        Ok(map([
            (key_of("driver"), Value::String(Arc::new(device.driver.clone()))),
            (key_of("attributes"), as_value(attributes)),
            (key_of("capacity"), as_value(capacity)),
            (key_of("allowMultipleAllocations"), Value::Bool(false)),
        ]))
    }
}

/// `entries` (qualified names) grouped by domain, each value converted by `value`.
fn by_domain<T>(
    entries: &BTreeMap<String, T>,
    driver: &str,
    mut value: impl FnMut(&str, &T) -> Result<Value, SelectorError>,
) -> Result<ByDomain, SelectorError> {
    let mut out = ByDomain::new();
    for (qualified, entry) in entries {
        let (domain, key) = split(qualified, driver);
        out.entry(domain).or_default().insert(key_of(&key), value(qualified, entry)?);
    }
    Ok(out)
}

/// `text` through `program` (`quantity(text)` or `semver(text)`) in `context`; an error names
/// the device, the capacity or attribute and the value.
fn convert(
    context: &mut Context,
    program: &Program,
    device: &str,
    name: &str,
    text: &str,
    kind: &'static str,
) -> Result<Value, SelectorError> {
    context.add_variable_from_value("text", Value::String(Arc::new(text.to_string())));
    program.execute(context).map_err(|_| SelectorError::Value {
        device: device.to_string(),
        name: name.to_string(),
        value: quoted(text),
        kind,
    })
}

fn map(entries: impl IntoIterator<Item = (Key, Value)>) -> Value {
    Value::Map(Map { map: Arc::new(entries.into_iter().collect()) })
}

fn key_of(s: &str) -> Key {
    Key::String(Arc::new(s.to_string()))
}

/// `domain/name` split; a bare name is in the driver's domain.
fn split(qualified: &str, driver: &str) -> (String, String) {
    match qualified.split_once('/') {
        Some((domain, name)) => (domain.to_string(), name.to_string()),
        None => (driver.to_string(), qualified.to_string()),
    }
}

/// The contents of the expression's quoted strings (single or double quotes).
fn string_literals(expression: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = expression.chars();
    while let Some(c) = chars.next() {
        if c == '\'' || c == '"' {
            let literal: String = chars.by_ref().take_while(|&d| d != c).collect();
            out.push(literal);
        }
    }
    out
}

fn quoted(expression: &str) -> String {
    geometer_solver::words::quoted(expression)
}

fn first_line(text: &str) -> String {
    geometer_solver::words::cut(text.lines().next().unwrap_or_default(), 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mig(profile: &str, memory: &str) -> CandidateDevice {
        CandidateDevice {
            driver: "gpu.nvidia.com".into(),
            attributes: BTreeMap::from([
                ("type".to_string(), Attribute::String("mig".into())),
                ("profile".to_string(), Attribute::String(profile.into())),
                ("driverVersion".to_string(), Attribute::Version("580.126.20".into())),
            ]),
            capacity: BTreeMap::from([("memory".to_string(), memory.to_string())]),
        }
    }

    fn matches(expression: &str, device: &CandidateDevice) -> Result<bool, SelectorError> {
        Selector::compile(expression)?.matches("d", device)
    }

    #[test]
    fn the_driver_examples_select_by_profile_and_capacity() {
        let small = mig("1g.10gb", "9856Mi");
        let large = mig("3g.40gb", "40192Mi");
        let by_profile = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'";
        assert_eq!((matches(by_profile, &small), matches(by_profile, &large)), (Ok(true), Ok(false)));
        let at_least = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10Gi')) >= 0";
        assert_eq!((matches(at_least, &small), matches(at_least, &large)), (Ok(false), Ok(true)));
        let class = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'";
        assert_eq!(matches(class, &small), Ok(true));
        let version = "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('570.0.0'))";
        assert_eq!(matches(version, &small), Ok(true));
    }

    #[test]
    fn another_domain_is_empty_and_a_missing_attribute_is_an_error() {
        let device = mig("1g.10gb", "9856Mi");
        assert_eq!(matches("!('model' in device.attributes['example.com'])", &device), Ok(true));
        let missing = matches("device.attributes['gpu.nvidia.com'].uuid == 'MIG-1'", &device);
        assert!(matches!(missing, Err(SelectorError::Evaluate { .. })), "{missing:?}");
        let bad = Selector::compile("device.attributes[").err().unwrap().to_string();
        assert!(bad.contains("does not compile"), "{bad}");
    }
}
