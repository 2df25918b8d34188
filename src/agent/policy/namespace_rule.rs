//! The namespace rule (DESIGN §2, "Trust": where), decided: the agent writes only in a
//! namespace it created or that carries its label, never a protected one. `apply` reads what
//! the cluster holds (its cache, a GET on a miss) and asks this judge.

use super::pull_secrets;
use crate::protocol::ImagePullSecret;
use std::collections::BTreeSet;

/// Whose a workspace namespace is. One the agent neither created nor labelled is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespace {
    Missing,
    /// With the pull secrets copied into it, and whether its Pod Security labels are current.
    Ours {
        copied: BTreeSet<ImagePullSecret>,
        labels_current: bool,
    },
}

/// What the cluster holds of an existing namespace, as the rule reads it.
#[derive(Debug, Clone, Copy)]
pub struct Found<'a> {
    /// It carries the agent's label.
    pub ours: bool,
    /// Its record of the pull secrets the agent copied into it.
    pub copied: Option<&'a str>,
    pub labels_current: bool,
}

/// Judge a namespace from what the cluster holds of it (None: it does not exist). `label` is
/// the agent's `key=value`, named in a refusal.
pub fn judge(namespace: &str, found: Option<Found<'_>>, label: &str) -> Result<Namespace, String> {
    match found {
        None => Ok(Namespace::Missing),
        Some(found) if found.ours => Ok(Namespace::Ours {
            copied: pull_secrets::parse_copied(found.copied),
            labels_current: found.labels_current,
        }),
        Some(_) => Err(format!("refused: namespace {namespace} exists and is not labelled {label}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_missing_ours_or_refused() {
        let label = "agent.gitlab.com/id=7";
        assert_eq!(judge("ns", None, label), Ok(Namespace::Missing));
        let found = Found { ours: true, copied: None, labels_current: false };
        let ours = Namespace::Ours { copied: BTreeSet::new(), labels_current: false };
        assert_eq!(judge("ns", Some(found), label), Ok(ours));
        let foreign = judge("ns", Some(Found { ours: false, ..found }), label);
        assert_eq!(foreign, Err("refused: namespace ns exists and is not labelled agent.gitlab.com/id=7".into()));
    }
}
