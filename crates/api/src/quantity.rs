//! Kubernetes resource quantities (`500m`, `2`, `1.5Gi`, `64Gi`, `1e3`, `129M`) as integers: the
//! one reading of them that the controller's adapter and the simulated cluster share.
//!
//! The suffixes are those of apimachinery's `resource.Quantity`
//! (kubernetes/apimachinery, `pkg/api/resource/quantity.go`): decimal SI (`n u m k M G T P E`),
//! binary (`Ki Mi Gi Ti Pi Ei`) and decimal exponents (`e3`, `E6`).

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("resource quantity {value:?} is not valid: {why}; write it like 500m, 2, 64Gi or 1.5G")]
pub struct QuantityError {
    pub value: String,
    pub why: &'static str,
}

/// The quantity in its base unit (cores, bytes, devices), as a float.
fn base_units(text: &str) -> Result<f64, QuantityError> {
    let err = |why| QuantityError { value: text.to_string(), why };
    let t = text.trim();
    if t.is_empty() {
        return Err(err("it is empty"));
    }
    let split =
        t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let factor: f64 = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..].parse().map_err(|_| err("the exponent is not a whole number"))?;
            10f64.powi(exp)
        }
        _ => return Err(err("the unit suffix is unknown")),
    };
    if number.starts_with('-') {
        return Err(err("it is negative"));
    }
    let n: f64 = number.parse().map_err(|_| err("the number part is not a number"))?;
    let value = n * factor;
    if !value.is_finite() {
        return Err(err("it is too large"));
    }
    Ok(value)
}

/// `value` rounded up to a whole number, tolerating float noise (0.1 * 1000 =
/// 100.00000000000001) first: the scheduler rounds requests up to milli-units.
fn round_up(value: f64) -> f64 {
    (value - 1e-6).ceil().max(0.0)
}

/// The quantity times `scale`, rounded up. `None` when `text` is not a quantity or the result
/// does not fit a `u64`.
pub fn parse_scaled(text: &str, scale: f64) -> Option<u64> {
    let scaled = base_units(text).ok()? * scale;
    (scaled <= u64::MAX as f64).then(|| round_up(scaled) as u64)
}

/// CPU (or any resource) in milli-units.
pub fn millicores(text: &str) -> Option<u64> {
    parse_scaled(text, 1000.0)
}

/// Memory (or any count) in whole units.
pub fn units(text: &str) -> Option<u64> {
    parse_scaled(text, 1.0)
}

/// The quantity times 1000, rounded up (a request of `0.1m` still needs something), with an
/// error that names the value.
pub fn milli(text: &str) -> Result<i128, QuantityError> {
    Ok(round_up(base_units(text)? * 1000.0) as i128)
}

/// Milli-units back to text for messages: `1500m`, `2`, `3Gi` where exact.
pub fn format_milli(resource: &str, value: i128) -> String {
    if resource == "memory" && value % 1000 == 0 {
        let bytes = value / 1000;
        for (unit, size) in [("Gi", 1i128 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
            if bytes % size == 0 && bytes != 0 {
                return format!("{}{unit}", bytes / size);
            }
        }
        return bytes.to_string();
    }
    if value % 1000 == 0 {
        (value / 1000).to_string()
    } else {
        format!("{value}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_memory_forms() {
        assert_eq!(millicores("500m"), Some(500));
        assert_eq!(millicores("2"), Some(2000));
        assert_eq!(millicores("0.1"), Some(100));
        assert_eq!(millicores("1.5"), Some(1500));
        assert_eq!(units("1Gi"), Some(1 << 30));
        assert_eq!(units("129M"), Some(129_000_000));
        assert_eq!(units("1e3"), Some(1000));
        assert_eq!(units("7"), Some(7));
        assert_eq!(units("abc"), None);
        assert_eq!(units("-1"), None);
        assert_eq!(units("1Zi"), None);
        assert_eq!(units(""), None);
    }

    #[test]
    fn suffixes_scale_to_milli_units() {
        assert_eq!(milli("500m").unwrap(), 500);
        assert_eq!(milli("2").unwrap(), 2000);
        assert_eq!(milli("1.5").unwrap(), 1500);
        assert_eq!(milli("0.1").unwrap(), 100);
        assert_eq!(milli("1Ki").unwrap(), 1_024_000);
        assert_eq!(milli("64Gi").unwrap(), 64 * (1i128 << 30) * 1000);
        assert_eq!(milli("1G").unwrap(), 1_000_000_000_000);
        assert_eq!(milli("1e3").unwrap(), 1_000_000);
    }

    #[test]
    fn bad_quantities_name_the_value() {
        for bad in ["", "ten", "5 apples", "-1", "1Qi", "1e"] {
            let e = milli(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn formatting_reads_like_kubectl() {
        assert_eq!(format_milli("cpu", 1500), "1500m");
        assert_eq!(format_milli("cpu", 4000), "4");
        assert_eq!(format_milli("memory", 8 * (1i128 << 30) * 1000), "8Gi");
        assert_eq!(format_milli("nvidia.com/mig-1g.10gb", 3000), "3");
    }
}
