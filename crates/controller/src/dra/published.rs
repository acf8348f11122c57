//! A ResourceSlice as planning keeps it: its driver, node and pool, each device's name and
//! `uuid`, and one device whole (the one whose attributes the devices Geometer could make copy,
//! [`super::offers`]). A large cluster's slices list hundreds of thousands of devices with a
//! dozen attributes each; read from a kubectl List, the rest is skipped while decoding, never
//! built. A DynamicMIG slice also keeps its GPUs' counter sets and, per device, its profile and
//! what it draws from them ([`super::fragmentation`] reads them).

use std::collections::BTreeMap;
use std::fmt;

use geometer_api::quantity;
use k8s_openapi::api::resource::v1::{Device, ResourcePool, ResourceSlice};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::stack::DraMode;

/// A ResourceSlice, projected.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedSlice {
    pub driver: String,
    /// `spec.nodeName`; `None` for a slice for no single node (`allNodes`, a node selector).
    pub node: Option<String>,
    pub mode: DraMode,
    pub pool: ResourcePool,
    pub devices: Vec<DeviceName>,
    /// The slice's first device, whole.
    pub sample: Option<Device>,
    /// DynamicMIG: the counter set of each GPU (`spec.sharedCounters`).
    pub counter_sets: Vec<Counters>,
}

/// A published device's name and `uuid` attribute (the MIG device UUID, or the GPU's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceName {
    pub name: String,
    pub uuid: Option<String>,
    /// DynamicMIG: what the device draws from its GPU's counters, and its profile.
    pub draw: Option<Box<Draw>>,
}

/// Named counters and their values: a GPU's counter set (`memory-slice-<i>`,
/// `multiprocessors`, ...), or what one device consumes of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub set: String,
    pub values: BTreeMap<String, u64>,
}

/// What a DynamicMIG device consumes (`consumesCounters`) and the profile it would be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draw {
    pub profile: Option<String>,
    pub from: Vec<Counters>,
}

impl DeviceName {
    fn of(device: &Device) -> DeviceName {
        let attribute = |name: &str| device.attributes.as_ref().and_then(|a| a.get(name)?.string.clone());
        let consumed: Vec<Counters> = device
            .consumes_counters
            .iter()
            .flatten()
            .map(|c| counters_of(&c.counter_set, c.counters.iter().map(|(k, v)| (k, &v.value.0))))
            .collect();
        let draw =
            (!consumed.is_empty()).then(|| Box::new(Draw { profile: attribute(PROFILE), from: consumed }));
        DeviceName { name: device.name.clone(), uuid: attribute(UUID), draw }
    }
}

/// A counter set from names and quantity texts; a value that is not a quantity counts 0.
fn counters_of<'a>(set: &str, values: impl Iterator<Item = (&'a String, &'a String)>) -> Counters {
    let values = values.map(|(k, v)| (k.clone(), quantity::parse_scaled(v, 1.0).unwrap_or(0))).collect();
    Counters { set: set.to_string(), values }
}

const UUID: &str = "uuid";
const PROFILE: &str = "profile";

fn consumes_counters(device: &Device) -> bool {
    device.consumes_counters.as_ref().is_some_and(|c| !c.is_empty())
}

fn named_node(node: Option<&String>) -> Option<String> {
    node.filter(|n| !n.is_empty()).cloned()
}

impl From<&ResourceSlice> for PublishedSlice {
    fn from(slice: &ResourceSlice) -> PublishedSlice {
        let spec = &slice.spec;
        let devices = spec.devices.as_deref().unwrap_or_default();
        let counters = spec.shared_counters.as_ref().is_some_and(|c| !c.is_empty());
        PublishedSlice {
            driver: spec.driver.clone(),
            node: named_node(spec.node_name.as_ref()),
            mode: DraMode::shown_by(counters, devices.iter().any(consumes_counters)),
            pool: spec.pool.clone(),
            devices: devices.iter().map(DeviceName::of).collect(),
            sample: devices.first().cloned(),
            counter_sets: spec
                .shared_counters
                .iter()
                .flatten()
                .map(|set| counters_of(&set.name, set.counters.iter().map(|(k, v)| (k, &v.value.0))))
                .collect(),
        }
    }
}

/// A watched slice cut to what [`PublishedSlice`] keeps: every device after the first without
/// its capacities and with `uuid` as its only attribute, and `profile` too where it consumes
/// counters (DynamicMIG) (the controller's cache holds every slice of the cluster between passes).
pub(crate) fn trim(slice: &mut ResourceSlice) {
    slice.metadata.managed_fields = None;
    for device in slice.spec.devices.iter_mut().flatten().skip(1) {
        device.capacity = None;
        let draws = consumes_counters(device);
        if let Some(attributes) = &mut device.attributes {
            attributes.retain(|name, _| name == UUID || (draws && name == PROFILE));
        }
    }
}

impl geometer_api::decode::Stored for PublishedSlice {}

impl<'de> Deserialize<'de> for PublishedSlice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<PublishedSlice, D::Error> {
        let SliceText { spec } = SliceText::deserialize(deserializer)?;
        let devices = spec.devices.unwrap_or_default();
        let shared = spec.shared_counters.unwrap_or_default();
        Ok(PublishedSlice {
            driver: spec.driver,
            node: named_node(spec.node_name.as_ref()),
            mode: DraMode::shown_by(!shared.is_empty(), devices.consume_counters),
            pool: spec.pool,
            devices: devices.names,
            sample: devices.sample,
            counter_sets: shared.into_iter().map(CountersText::read).collect(),
        })
    }
}

/// The fields of a slice's text that are read; everything else is skipped.
#[derive(Deserialize)]
struct SliceText {
    spec: SpecText,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecText {
    driver: String,
    #[serde(default)]
    node_name: Option<String>,
    pool: ResourcePool,
    #[serde(default)]
    shared_counters: Option<Vec<CountersText>>,
    #[serde(default)]
    devices: Option<DevicesText>,
}

/// A counter set (`name`) or a device's consumption of one (`counterSet`), as text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountersText {
    #[serde(alias = "counterSet")]
    name: String,
    #[serde(default)]
    counters: BTreeMap<String, CounterText>,
}

#[derive(Deserialize)]
struct CounterText {
    value: String,
}

impl CountersText {
    fn read(self) -> Counters {
        counters_of(&self.name, self.counters.iter().map(|(k, v)| (k, &v.value)))
    }
}

/// `spec.devices`: the first device whole, then only each device's name, `uuid` and whether
/// it consumes counters.
#[derive(Default)]
struct DevicesText {
    sample: Option<Device>,
    names: Vec<DeviceName>,
    consume_counters: bool,
}

impl<'de> Deserialize<'de> for DevicesText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<DevicesText, D::Error> {
        deserializer.deserialize_seq(DevicesVisitor)
    }
}

struct DevicesVisitor;

impl<'de> Visitor<'de> for DevicesVisitor {
    type Value = DevicesText;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of devices")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DevicesText, A::Error> {
        let mut out = DevicesText::default();
        if let Some(first) = seq.next_element::<Device>()? {
            out.consume_counters = consumes_counters(&first);
            out.names.push(DeviceName::of(&first));
            out.sample = Some(first);
        }
        while let Some(device) = seq.next_element::<DeviceText>()? {
            let consumed: Vec<Counters> =
                device.consumes_counters.unwrap_or_default().into_iter().map(CountersText::read).collect();
            out.consume_counters |= !consumed.is_empty();
            let Attributes { uuid, profile } = device.attributes.unwrap_or_default();
            let draw = (!consumed.is_empty()).then(|| Box::new(Draw { profile, from: consumed }));
            out.names.push(DeviceName { name: device.name, uuid, draw });
        }
        Ok(out)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceText {
    name: String,
    #[serde(default)]
    attributes: Option<Attributes>,
    #[serde(default)]
    consumes_counters: Option<Vec<CountersText>>,
}

/// A device's attributes, of which only `uuid` and (for a DynamicMIG device) `profile` are
/// kept.
#[derive(Default)]
struct Attributes {
    uuid: Option<String>,
    profile: Option<String>,
}

impl<'de> Deserialize<'de> for Attributes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Attributes, D::Error> {
        deserializer.deserialize_map(AttributesVisitor)
    }
}

struct AttributesVisitor;

impl<'de> Visitor<'de> for AttributesVisitor {
    type Value = Attributes;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of device attributes")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Attributes, A::Error> {
        let mut kept = Attributes::default();
        while let Some(key) = map.next_key::<AttributeName>()? {
            match key {
                AttributeName::Uuid => kept.uuid = map.next_value::<AttributeText>()?.string,
                AttributeName::Profile => kept.profile = map.next_value::<AttributeText>()?.string,
                AttributeName::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(kept)
    }
}

/// An attribute's name, read without keeping it.
enum AttributeName {
    Uuid,
    Profile,
    Other,
}

impl<'de> Deserialize<'de> for AttributeName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<AttributeName, D::Error> {
        struct NameVisitor;
        impl Visitor<'_> for NameVisitor {
            type Value = AttributeName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an attribute name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<AttributeName, E> {
                Ok(match name {
                    UUID => AttributeName::Uuid,
                    PROFILE => AttributeName::Profile,
                    _ => AttributeName::Other,
                })
            }
        }
        deserializer.deserialize_identifier(NameVisitor)
    }
}

#[derive(Deserialize)]
struct AttributeText {
    #[serde(default)]
    string: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice() -> serde_json::Value {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 2, "resourceSliceCount": 1},
            "devices": [
                {"name": "gpu-0-mig-1g10gb-19-0", "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}, "uuid": {"string": "MIG-1"}},
                 "capacity": {"memory": {"value": "10240Mi"}}},
                {"name": "gpu-0-mig-1g10gb-19-1", "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}, "uuid": {"string": "MIG-2"}, "cudaMajor": {"int": 12}},
                 "capacity": {"memory": {"value": "10240Mi"}}},
                {"name": "gpu-1", "attributes": {"type": {"string": "gpu"}}}]}})
    }

    #[test]
    fn a_slice_read_from_text_keeps_what_the_typed_object_gives() {
        let text = slice().to_string();
        let typed: ResourceSlice = serde_json::from_str(&text).unwrap();
        let read: PublishedSlice = serde_json::from_str(&text).unwrap();
        assert_eq!(read, PublishedSlice::from(&typed));
        assert_eq!(read.node.as_deref(), Some("n1"));
        assert_eq!(read.mode, DraMode::StaticMig);
        let uuids: Vec<_> = read.devices.iter().map(|d| d.uuid.as_deref()).collect();
        assert_eq!(uuids, [Some("MIG-1"), Some("MIG-2"), None]);
        assert_eq!(read.sample.unwrap().capacity.unwrap().len(), 1, "the first device is kept whole");
    }

    #[test]
    fn a_watched_slice_trimmed_keeps_what_planning_reads() {
        let mut typed: ResourceSlice = serde_json::from_value(slice()).unwrap();
        let whole = PublishedSlice::from(&typed);
        trim(&mut typed);
        assert_eq!(PublishedSlice::from(&typed), whole);
        let second = &typed.spec.devices.as_ref().unwrap()[1];
        assert!(second.capacity.is_none() && second.attributes.as_ref().unwrap().len() == 1);
    }

    #[test]
    fn a_trimmed_dynamic_mig_slice_keeps_each_devices_profile_and_draw() {
        let mut value = slice();
        value["spec"]["sharedCounters"] =
            json!([{"name": "gpu-0-counter-set", "counters": {"memory-slice-0": {"value": "1"}}}]);
        for device in value["spec"]["devices"].as_array_mut().unwrap().iter_mut().take(2) {
            device["attributes"]["profile"] = json!({"string": "1g.10gb"});
            device["consumesCounters"] =
                json!([{"counterSet": "gpu-0-counter-set", "counters": {"memory-slice-0": {"value": "1"}}}]);
        }
        let mut typed: ResourceSlice = serde_json::from_value(value.clone()).unwrap();
        let read: PublishedSlice = serde_json::from_value(value).unwrap();
        assert_eq!(read, PublishedSlice::from(&typed));
        trim(&mut typed);
        assert_eq!(PublishedSlice::from(&typed), read, "trimming keeps what planning reads");
        let draw = read.devices[1].draw.as_ref().expect("a DynamicMIG device draws");
        assert_eq!(draw.profile.as_deref(), Some("1g.10gb"));
        assert_eq!(draw.from[0].values.get("memory-slice-0"), Some(&1));
        assert_eq!(read.counter_sets[0].set, "gpu-0-counter-set");
        assert!(read.devices[2].draw.is_none(), "the whole GPU draws nothing here");
    }

    #[test]
    fn a_device_consuming_counters_after_the_first_shows_dynamic_mig() {
        let mut value = slice();
        value["spec"]["devices"][2]["consumesCounters"] =
            json!([{"counterSet": "gpu-1-counter-set", "counters": {}}]);
        let read: PublishedSlice = serde_json::from_value(value).unwrap();
        assert_eq!(read.mode, DraMode::DynamicMig);
    }

    #[test]
    fn a_device_without_a_name_is_an_error() {
        let mut value = slice();
        value["spec"]["devices"][1].as_object_mut().unwrap().remove("name");
        let error = serde_json::from_value::<PublishedSlice>(value).unwrap_err().to_string();
        assert!(error.contains("name"), "{error}");
    }
}
