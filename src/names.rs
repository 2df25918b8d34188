//! Kubernetes' own rules for names (RFC 1123), which both halves check: the agent on every
//! info the control plane answers, the control plane on every report and request.

/// An RFC 1123 label, as Kubernetes requires of a namespace's name: at most 63 characters of
/// `a-z`, `0-9` and `-`, starting and ending with a letter or digit.
pub fn is_dns_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    let edge_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    bytes.len() <= 63
        && edge_ok(bytes.first())
        && edge_ok(bytes.last())
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// An environment variable's name as Kubernetes takes it (and so as a Secret key too).
pub fn is_env_name(s: &str) -> bool {
    (1..=253).contains(&s.len())
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// [`is_dns_label`], or why not: `"{what} {value:?} is not a DNS label"`.
pub fn dns_label(what: &str, value: &str) -> Result<(), String> {
    if is_dns_label(value) { Ok(()) } else { Err(format!("{what} {value:?} is not a DNS label")) }
}

/// An RFC 1123 subdomain, as most objects' names: dot-separated labels, at most 253 in all.
pub fn is_dns_subdomain(value: &str) -> bool {
    value.len() <= 253 && value.split('.').all(is_dns_label)
}

/// A namespace's name: one DNS label.
pub fn is_namespace_name(value: &str) -> bool {
    is_dns_label(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_subdomains_and_namespaces() {
        for good in ["a", "ws-1", "0a", &"a".repeat(63)] {
            assert!(dns_label("name", good).is_ok() && is_namespace_name(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "a/b", "ä", &"a".repeat(64)] {
            assert!(dns_label("name", bad).is_err() && !is_namespace_name(bad), "{bad}");
        }
        assert!(is_dns_subdomain("a.b-c.d") && !is_dns_subdomain("a..b") && !is_dns_subdomain(&"a.".repeat(127)));
    }
}
