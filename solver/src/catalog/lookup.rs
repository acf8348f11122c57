//! Finding a model from whatever a user or a node label calls it.

use std::collections::HashMap;

use super::{GpuModel, UnplaceableModel};

/// NVIDIA's PCI vendor id, the low half of every device id in the catalog.
pub const NVIDIA_VENDOR: u32 = 0x10DE;

#[derive(Debug, Clone, Default)]
pub(super) struct Index {
    keys: HashMap<String, usize>,
    device_ids: HashMap<u32, usize>,
    names: HashMap<String, usize>,
}

impl Index {
    /// `order` lists model positions from lowest to highest priority: when two models claim
    /// the same device id or name, the later one in `order` wins (an override file's models
    /// come last, so its claims beat the built-in ones).
    pub(super) fn build(models: &[GpuModel], order: &[usize]) -> Index {
        let mut index = Index::default();
        for &i in order {
            let model = &models[i];
            index.keys.insert(model.key.to_ascii_lowercase(), i);
            // "RTX PRO 6000" for the key RTX-PRO-6000.
            index.names.insert(normalize_name(&model.key), i);
            for &id in &model.device_ids {
                index.device_ids.insert(id, i);
            }
            for name in model.nvml_names.iter().chain(&model.product_labels) {
                index.names.insert(normalize_name(name), i);
            }
        }
        index
    }

    pub(super) fn find(&self, query: &str) -> Option<usize> {
        let query = query.trim();
        if query.is_empty() {
            return None;
        }
        if let Some(&i) = self.keys.get(&query.to_ascii_lowercase()) {
            return Some(i);
        }
        if let Some(id) = parse_device_id(query) {
            if let Some(&i) = self.device_ids.get(&id) {
                return Some(i);
            }
        }
        self.names.get(&normalize_name(query)).copied()
    }

    pub(super) fn by_device_id(&self, id: u32) -> Option<usize> {
        self.device_ids.get(&id).copied()
    }
}

pub(super) fn find_unplaceable<'a>(
    list: &'a [UnplaceableModel],
    query: &str,
) -> Option<&'a UnplaceableModel> {
    let wanted = normalize_name(query);
    list.iter().find(|u| {
        u.key.eq_ignore_ascii_case(query.trim())
            || normalize_name(&u.key) == wanted
            || u.nvml_names.iter().any(|n| normalize_name(n) == wanted)
    })
}

/// `0x20B010DE`, `20B010DE`, `0x20b0`, `20b0`, `10de:20b0` -> `0x20B010DE`.
pub fn parse_device_id(text: &str) -> Option<u32> {
    let text = text.trim();
    let (vendor, device) = match text.split_once(':') {
        Some((vendor, device)) => (Some(vendor), device),
        None => (None, text),
    };
    let hex = device.strip_prefix("0x").or_else(|| device.strip_prefix("0X")).unwrap_or(device);
    if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let vendor = match vendor {
        Some(v) => {
            let v = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")).unwrap_or(v);
            if v.len() != 4 {
                return None;
            }
            u32::from_str_radix(v, 16).ok()?
        }
        None => NVIDIA_VENDOR,
    };
    match hex.len() {
        4 => Some((u32::from_str_radix(hex, 16).ok()? << 16) | vendor),
        8 if text.contains(':') => None,
        8 => u32::from_str_radix(hex, 16).ok(),
        _ => None,
    }
}

/// Canonical form of an NVML name or product label: case-folded, spaces as '-', without the
/// GPU Operator's `-SHARED` (time-slicing) and `-MIG-<profile>` (single strategy) suffixes.
pub fn normalize_name(name: &str) -> String {
    let mut s = name.trim().to_ascii_lowercase().replace([' ', '_'], "-");
    if let Some(stripped) = s.strip_suffix("-shared") {
        s = stripped.to_string();
    }
    if let Some(pos) = s.find("-mig-") {
        s.truncate(pos);
    }
    s
}

/// The `nvidia.com/gpu.product` label the GPU Operator derives from an NVML name.
pub fn product_label(nvml_name: &str) -> String {
    nvml_name.trim().replace(' ', "-")
}

/// `0x20B010DE`.
pub fn format_device_id(id: u32) -> String {
    format!("0x{id:08X}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_id_forms() {
        assert_eq!(parse_device_id("0x20B010DE"), Some(0x20B010DE));
        assert_eq!(parse_device_id("20b010de"), Some(0x20B010DE));
        assert_eq!(parse_device_id("0X20B0"), Some(0x20B010DE));
        assert_eq!(parse_device_id("10de:20b0"), Some(0x20B010DE));
        assert_eq!(parse_device_id("0x10de:0x20b0"), Some(0x20B010DE));
        assert_eq!(parse_device_id("8086:20b0"), Some(0x20B08086), "other vendors keep their id");
        for bad in
            ["", "0x", "20b", "20b01", "0x20B010DE0", "g0b0", "10de:20b010de", "1:20b0", "0x20b0 extra"]
        {
            assert_eq!(parse_device_id(bad), None, "{bad:?}");
        }
        assert_eq!(format_device_id(0x20B010DE), "0x20B010DE");
    }

    #[test]
    fn names_normalize_like_gpu_operator_labels() {
        assert_eq!(normalize_name("NVIDIA A100-SXM4-40GB"), "nvidia-a100-sxm4-40gb");
        assert_eq!(normalize_name("NVIDIA-A100-SXM4-40GB-SHARED"), "nvidia-a100-sxm4-40gb");
        assert_eq!(normalize_name("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"), "nvidia-a100-sxm4-40gb");
        assert_eq!(normalize_name("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"), "nvidia-a100-sxm4-40gb");
        assert_eq!(product_label("NVIDIA H100 80GB HBM3"), "NVIDIA-H100-80GB-HBM3");
    }
}
