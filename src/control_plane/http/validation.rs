//! What the management API accepts, free of I/O: names, pull secrets, actions.

use crate::protocol::{DesiredState, ImagePullSecret};

/// Names and namespaces must be DNS names, and one name may come from one namespace only:
/// every copy lands in the workspace namespace under the source's name.
pub fn validate_pull_secrets(secrets: &[ImagePullSecret]) -> Result<(), String> {
    let mut names = std::collections::HashMap::new();
    for secret in secrets {
        if !is_dns_subdomain(&secret.name) || !is_namespace_name(&secret.namespace) {
            return Err("image pull secrets need a DNS name and namespace".into());
        }
        if let Some(other) = names.insert(&secret.name, &secret.namespace)
            && *other != secret.namespace
        {
            return Err(format!("image pull secret {} is named in both {other} and {}", secret.name, secret.namespace));
        }
    }
    Ok(())
}

/// A workspace owner: a GitLab username's characters, at most 255 of them.
pub fn is_owner_name(s: &str) -> bool {
    (1..=255).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// An agent's id or a workspace's name: a DNS label short enough that the namespace made of
/// both (`wsync-<agent>-<name>`) is one too.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 40 && crate::names::is_dns_label(s)
}

pub use crate::names::{is_dns_subdomain, is_env_name, is_namespace_name};

/// One part of a URL's path or query, percent-encoded: a name can never add a `/`, `?`, `#`
/// or `&` to the link it is part of, and the result needs no HTML escaping.
pub fn url_part(s: &str) -> String {
    const UNRESERVED: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

pub fn desired_for_action(action: &str) -> Option<DesiredState> {
    match action {
        "start" => Some(DesiredState::Running),
        "stop" => Some(DesiredState::Stopped),
        "restart" => Some(DesiredState::RestartRequested),
        "terminate" => Some(DesiredState::Terminated),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_in_a_link_stays_one_part_of_it() {
        assert_eq!(url_part("ws-1.a_b~"), "ws-1.a_b~");
        assert_eq!(url_part("../b/x?y#z&after=w"), "..%2Fb%2Fx%3Fy%23z%26after%3Dw");
        assert_eq!(url_part("<b>\"'"), "%3Cb%3E%22%27");
        assert_eq!(url_part("é"), "%C3%A9");
    }
}
