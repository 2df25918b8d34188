//! Drift, decided without I/O: whether a live object already holds what an apply would send.
//!
//! The apiserver records, in each object's managedFields, the fields that the agent's field
//! manager set by its last server-side apply. Anyone who changes one of them since, by an
//! update or a forced apply, takes it over, and it leaves the agent's set. So the live object
//! projected onto the agent's set equals what the agent sent, exactly when no one changed it
//! since; and it equals what the agent would send now, exactly when the desired object is also
//! unchanged. Only then is the object skipped; a full resync that finds no drift sends no PATCH.
//! Everything is read from a LIST taken in the same cycle: nothing survives from earlier ones.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, RandomState};

/// What identifies an object across API versions: group, kind, namespace, name.
type Identity<'a> = (&'a str, &'a str, &'a str, &'a str);

/// The owned part of an object, canonical and digested (128 bits of SHA-256).
type OwnedDigest = [u8; 16];

/// The live objects of the kinds the agent could list this cycle, each as the digest of its
/// fields that the agent's field manager owns. Compact: about 40 bytes an object.
pub struct LiveObjects {
    field_manager: String,
    /// The (group, kind) pairs listed whole: an object of another kind is never in sync.
    listed: BTreeSet<(String, String)>,
    hasher: RandomState,
    owned: HashMap<u64, OwnedDigest>,
}

impl LiveObjects {
    pub fn new(field_manager: impl Into<String>) -> Self {
        Self {
            field_manager: field_manager.into(),
            listed: BTreeSet::new(),
            hasher: RandomState::new(),
            owned: HashMap::new(),
        }
    }

    /// Record one listed object of `group`/`kind` (a LIST's items carry no apiVersion or
    /// kind). One the agent never applied, or whose ownership is unclear (two apply entries
    /// of the agent's), is left out: it is applied.
    pub fn observe(&mut self, group: &str, kind: &str, live: &Value) {
        let metadata = &live["metadata"];
        let (Some(namespace), Some(name)) = (metadata["namespace"].as_str(), metadata["name"].as_str()) else {
            return;
        };
        let Some(set) = owned_set(live, &self.field_manager) else { return };
        let Some(projected) = project(live, set) else { return };
        let key = self.key((group, kind, namespace, name));
        self.owned.insert(key, owned_digest(&projected));
    }

    /// An empty set that keys objects as this one does: for one kind, listed beside the others.
    pub fn part(&self) -> Self {
        Self {
            field_manager: self.field_manager.clone(),
            listed: BTreeSet::new(),
            hasher: self.hasher.clone(),
            owned: HashMap::new(),
        }
    }

    /// Take in a [`part`](Self::part): its objects, and the kinds it listed whole.
    pub fn absorb(&mut self, part: LiveObjects) {
        self.listed.extend(part.listed);
        self.owned.extend(part.owned);
    }

    /// Every object of this kind has been observed.
    pub fn listed_whole(&mut self, group: &str, kind: &str) {
        self.listed.insert((group.to_string(), kind.to_string()));
    }

    /// Whether applying `desired` (as it would be sent) would change nothing: the live object
    /// exists, and what the agent owns of it is exactly `desired`.
    pub fn in_sync(&self, desired: &Value, default_namespace: &str) -> bool {
        let Some(identity) = identity(desired, default_namespace) else { return false };
        if !self.listed.contains(&(identity.0.to_string(), identity.1.to_string())) {
            return false;
        }
        self.owned.get(&self.key(identity)).is_some_and(|live| *live == owned_digest(desired))
    }

    pub fn len(&self) -> usize {
        self.owned.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owned.is_empty()
    }

    fn key(&self, (group, kind, namespace, name): Identity<'_>) -> u64 {
        self.hasher.hash_one((group, kind, namespace, name))
    }
}

fn identity<'a>(object: &'a Value, default_namespace: &'a str) -> Option<Identity<'a>> {
    let api_version = object["apiVersion"].as_str()?;
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    let kind = object["kind"].as_str()?;
    let metadata = &object["metadata"];
    let namespace = metadata["namespace"].as_str().unwrap_or(default_namespace);
    let name = metadata["name"].as_str()?;
    Some((group, kind, namespace, name))
}

/// The agent's apply entry in managedFields (`fieldsV1`), if there is exactly one.
fn owned_set<'a>(live: &'a Value, field_manager: &str) -> Option<&'a Map<String, Value>> {
    let entries = live["metadata"]["managedFields"].as_array()?;
    let mut ours = entries.iter().filter(|entry| {
        entry["manager"] == field_manager
            && entry["operation"] == "Apply"
            && entry["subresource"].as_str().is_none_or(str::is_empty)
    });
    let entry = ours.next()?;
    if ours.next().is_some() {
        return None;
    }
    entry["fieldsV1"].as_object()
}

/// `live`, keeping only what `set` (a fieldsV1 trie) names. `None` when the set does not fit
/// the object's shape.
pub fn project(live: &Value, set: &Map<String, Value>) -> Option<Value> {
    let children: Vec<(&str, &Map<String, Value>)> = set
        .iter()
        .filter(|(path, _)| path.as_str() != ".")
        .map(|(p, s)| Some((p.as_str(), s.as_object()?)))
        .collect::<Option<_>>()?;
    if children.is_empty() {
        return Some(live.clone());
    }
    match live {
        Value::Object(fields) => {
            let mut out = Map::new();
            for (path, subset) in children {
                let name = path.strip_prefix("f:")?;
                if let Some(value) = fields.get(name) {
                    out.insert(name.to_string(), project(value, subset)?);
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(items) => {
            let selectors: Vec<(ListSelector, &Map<String, Value>)> = children
                .into_iter()
                .map(|(path, subset)| Some((ListSelector::parse(path)?, subset)))
                .collect::<Option<_>>()?;
            let mut out = Vec::new();
            for (index, item) in items.iter().enumerate() {
                if let Some((_, subset)) = selectors.iter().find(|(selector, _)| selector.selects(index, item)) {
                    out.push(project(item, subset)?);
                }
            }
            Some(Value::Array(out))
        }
        scalar => Some(scalar.clone()),
    }
}

/// How fieldsV1 names a list element: by its key fields, its value, or its index.
enum ListSelector {
    Key(Map<String, Value>),
    Value(Value),
    Index(usize),
}

impl ListSelector {
    fn parse(path: &str) -> Option<Self> {
        if let Some(key) = path.strip_prefix("k:") {
            return serde_json::from_str(key).ok().map(Self::Key);
        }
        if let Some(value) = path.strip_prefix("v:") {
            return serde_json::from_str(value).ok().map(Self::Value);
        }
        path.strip_prefix("i:")?.parse().ok().map(Self::Index)
    }

    fn selects(&self, index: usize, item: &Value) -> bool {
        match self {
            Self::Key(key) => key.iter().all(|(field, value)| same_scalar(&item[field.as_str()], value)),
            Self::Value(value) => same_scalar(item, value),
            Self::Index(at) => *at == index,
        }
    }
}

fn same_scalar(a: &Value, b: &Value) -> bool {
    let mut left = String::new();
    let mut right = String::new();
    canonical(a, &mut left);
    canonical(b, &mut right);
    left == right
}

/// The fields the apiserver never records as owned, on both sides of the comparison.
const UNOWNED_METADATA: &[&str] =
    &["name", "namespace", "creationTimestamp", "selfLink", "uid", "resourceVersion", "generation", "managedFields"];

/// The digest of an object's owned part: without its identity, its status and the metadata
/// the apiserver keeps itself.
fn owned_digest(object: &Value) -> OwnedDigest {
    let mut text = String::new();
    match object {
        Value::Object(fields) => {
            let mut owned = fields.clone();
            for key in ["apiVersion", "kind", "status"] {
                owned.remove(key);
            }
            if let Some(Value::Object(metadata)) = owned.get_mut("metadata") {
                UNOWNED_METADATA.iter().for_each(|key| drop(metadata.remove(*key)));
            }
            canonical(&Value::Object(owned), &mut text);
        }
        other => canonical(other, &mut text),
    }
    let digest = Sha256::digest(text.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// A canonical text: keys sorted, nulls and empty maps and lists left out (the apiserver
/// drops them), and every scalar as a string (`1` and `"1"` are the same quantity).
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(fields) => {
            let mut keys: Vec<&String> = fields.keys().filter(|k| !is_empty(&fields[k.as_str()])).collect();
            keys.sort();
            out.push('{');
            for key in keys {
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                canonical(&fields[key.as_str()], out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for item in items {
                canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::String(text) => out.push_str(&Value::from(text.as_str()).to_string()),
        Value::Null => out.push_str("null"),
        scalar => out.push_str(&Value::from(scalar.to_string()).to_string()),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(fields) => fields.values().all(is_empty),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
