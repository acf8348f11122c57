//! Kubernetes resource quantities (`500m`, `2`, `64Gi`, `1.5G`, `1e3`) as whole milli-units, so
//! that CPU, memory and device counts compare in one integer type.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("resource quantity {value:?} is not valid: {why}; write it like 500m, 2, 64Gi or 1.5G")]
pub struct QuantityError {
    pub value: String,
    pub why: &'static str,
}

/// The quantity times 1000, rounded up (a request of `0.1m` still needs something).
pub fn milli(text: &str) -> Result<i128, QuantityError> {
    let err = |why| QuantityError { value: text.to_string(), why };
    let t = text.trim();
    if t.is_empty() {
        return Err(err("it is empty"));
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let scale: f64 = match suffix {
        "" => 1.0,
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
    let n: f64 = number.parse().map_err(|_| err("the number part is not a number"))?;
    if n < 0.0 {
        return Err(err("it is negative"));
    }
    Ok((n * scale * 1000.0).ceil() as i128)
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
    fn suffixes_scale_to_milli_units() {
        assert_eq!(milli("500m").unwrap(), 500);
        assert_eq!(milli("2").unwrap(), 2000);
        assert_eq!(milli("1.5").unwrap(), 1500);
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
