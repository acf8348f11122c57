//! Kubernetes resource quantities (`500m`, `2`, `1.5Gi`, `1e3`, `129M`) as integers.

/// The quantity times `scale`, rounded up (the scheduler rounds requests up to milli-units).
/// `None` when `text` is not a quantity.
pub fn parse_scaled(text: &str, scale: f64) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number.starts_with('-') {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let factor = match suffix {
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
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let scaled = value * factor * scale;
    if !scaled.is_finite() || scaled < 0.0 || scaled > u64::MAX as f64 {
        return None;
    }
    // Tolerate float noise (0.1 * 1000 = 100.00000000000001) before rounding up.
    Some((scaled - 1e-6).ceil().max(0.0) as u64)
}

/// CPU in millicores.
pub fn millicores(text: &str) -> Option<u64> {
    parse_scaled(text, 1000.0)
}

/// Memory (or any count) in whole units.
pub fn units(text: &str) -> Option<u64> {
    parse_scaled(text, 1.0)
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
}
