//! All YAML lives here, on serde-saphyr (serde_yaml is archived). A config comes from the
//! control plane, which is not trusted (DESIGN §2, "Trust": how much): the parser's budget
//! bounds its events, anchors and aliases, and the documents are built against a byte budget
//! that counts every aliased copy, so a 14 KB billion-laughs stream is refused at 1 MiB of
//! expansion instead of growing the agent by hundreds of megabytes.

use kube::api::DynamicObject;
use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use std::cell::Cell;
use std::fmt;

/// One workspace's config, before and after alias expansion.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;

#[derive(thiserror::Error, Debug)]
pub enum YamlError {
    #[error("the config is {0} bytes; at most {MAX_CONFIG_BYTES} are accepted")]
    TooLarge(usize),
    #[error("invalid YAML: {0}")]
    Parse(serde_saphyr::Error),
    #[error("document {index}: not a Kubernetes object: {source}")]
    NotAnObject { index: usize, source: serde_json::Error },
    #[error("document {index}: missing {field}")]
    MissingField { index: usize, field: &'static str },
}

fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_events: 250_000,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_recorded_anchor_events: 250_000,
            max_recorded_anchor_bytes: MAX_CONFIG_BYTES,
        },
    }
}

/// Parse a multi-document stream into objects. Empty documents are skipped; any broken one
/// fails the whole stream, so that nothing of a half-understood config is applied.
pub fn parse_objects(stream: &str) -> Result<Vec<DynamicObject>, YamlError> {
    if stream.len() > MAX_CONFIG_BYTES {
        return Err(YamlError::TooLarge(stream.len()));
    }
    LEFT.with(|left| left.set(MAX_CONFIG_BYTES));
    let documents: Vec<Budgeted> =
        serde_saphyr::from_multiple_with_options(stream, options()).map_err(YamlError::Parse)?;
    let mut objects = Vec::with_capacity(documents.len());
    for (index, Budgeted(value)) in documents.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        let object: DynamicObject =
            serde_json::from_value(value).map_err(|source| YamlError::NotAnObject { index, source })?;
        let types = object.types.as_ref().ok_or(YamlError::MissingField { index, field: "apiVersion/kind" })?;
        if types.kind.is_empty() || types.api_version.is_empty() {
            return Err(YamlError::MissingField { index, field: "apiVersion/kind" });
        }
        if object.metadata.name.as_deref().unwrap_or_default().is_empty() {
            return Err(YamlError::MissingField { index, field: "metadata.name" });
        }
        objects.push(object);
    }
    Ok(objects)
}

/// One YAML (or JSON) document as a value, within the same budgets: an operator's file.
pub fn parse_value(text: &str) -> Result<serde_json::Value, YamlError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(YamlError::TooLarge(text.len()));
    }
    LEFT.with(|left| left.set(MAX_CONFIG_BYTES));
    let Budgeted(value) = serde_saphyr::from_str_with_options(text, options()).map_err(YamlError::Parse)?;
    Ok(value)
}

/// A devfile as written (#40), at most this long: its workspace's config, built from it, must
/// fit the agent's [`MAX_CONFIG_BYTES`].
pub const MAX_DEVFILE_BYTES: usize = 256 * 1024;
/// How deep a devfile's mappings and lists may nest; a real one needs under ten.
const MAX_DEVFILE_DEPTH: usize = 32;

/// Why a devfile could not be read; each says so in words a user can act on.
#[derive(thiserror::Error, Debug)]
pub enum DevfileReadError {
    #[error("the devfile is {0} bytes; at most {MAX_DEVFILE_BYTES} are accepted")]
    TooLarge(usize),
    #[error("the devfile is not UTF-8 text (a byte at offset {0} is not)")]
    NotUtf8(usize),
    #[error("the devfile uses YAML anchors or aliases, which are not accepted (as GitLab refuses them)")]
    Aliases,
    #[error("the devfile nests deeper than {MAX_DEVFILE_DEPTH} levels")]
    TooDeep,
    #[error("invalid YAML: {0}")]
    Parse(String),
}

/// A devfile's bytes as text, when they can be one: at most [`MAX_DEVFILE_BYTES`], UTF-8. The
/// CLI and the page's upload refuse by it before they send or parse.
pub fn devfile_text(bytes: &[u8]) -> Result<&str, DevfileReadError> {
    if bytes.len() > MAX_DEVFILE_BYTES {
        return Err(DevfileReadError::TooLarge(bytes.len()));
    }
    std::str::from_utf8(bytes).map_err(|e| DevfileReadError::NotUtf8(e.valid_up_to()))
}

/// One devfile, read from a user's bytes: UTF-8, at most [`MAX_DEVFILE_BYTES`], one document,
/// no anchors or aliases (GitLab's `YAML.safe_load` takes none), nested at most 32 deep.
pub fn parse_devfile(bytes: &[u8]) -> Result<serde_json::Value, DevfileReadError> {
    let text = devfile_text(bytes)?;
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_aliases: 0,
            max_anchors: 0,
            max_depth: MAX_DEVFILE_DEPTH,
            max_inclusion_depth: 0,
            max_documents: 1,
        },
        // YAML 1.2's booleans: `y`, `no` and `on` stay the strings a user wrote.
        strict_booleans: true,
    };
    LEFT.with(|left| left.set(MAX_CONFIG_BYTES));
    use serde_saphyr::{Error, budget::BudgetBreach};
    let error = match serde_saphyr::from_str_with_options(text, options) {
        Ok(Budgeted(value)) => return Ok(value),
        Err(error) => error,
    };
    // The error itself, without the wrappers that quote the source around it.
    let mut cause = &error;
    while let Error::WithSnippet { error, .. } | Error::AliasError { error, .. } = cause {
        cause = error;
    }
    Err(match cause {
        Error::Budget { breach: BudgetBreach::Depth { .. }, .. } => DevfileReadError::TooDeep,
        Error::Budget { breach: BudgetBreach::Aliases { .. } | BudgetBreach::Anchors { .. }, .. } => {
            DevfileReadError::Aliases
        }
        cause => DevfileReadError::Parse(cause.to_string()),
    })
}

/// Serialize any value as YAML, for CLI output, the CRD and the control plane's configs.
pub fn to_string<T: serde::Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(value)
}

thread_local! {
    /// Bytes the document being built may still take. Parsing is synchronous, so one per thread.
    static LEFT: Cell<usize> = const { Cell::new(0) };
}

/// A JSON value built under the byte budget: each scalar costs its length, each node a little.
struct Budgeted(serde_json::Value);

fn charge<E: serde::de::Error>(bytes: usize) -> Result<(), E> {
    LEFT.with(|left| match left.get().checked_sub(bytes.saturating_add(2)) {
        Some(rest) => {
            left.set(rest);
            Ok(())
        }
        None => Err(E::custom(format!(
            "the config expands past {MAX_CONFIG_BYTES} bytes (anchors and aliases count once per use)"
        ))),
    })
}

impl<'de> Deserialize<'de> for Budgeted {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BudgetedVisitor).map(Budgeted)
    }
}

struct BudgetedVisitor;

impl<'de> Visitor<'de> for BudgetedVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
        charge(5)?;
        Ok(v.into())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        charge(20)?;
        Ok(v.into())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        charge(20)?;
        Ok(v.into())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        charge(24)?;
        serde_json::Number::from_f64(v).map(Into::into).ok_or_else(|| E::custom(format!("{v} is not a JSON number")))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        charge(v.len())?;
        Ok(v.into())
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
        charge(v.len())?;
        Ok(v.into())
    }

    fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<Self::Value, E> {
        Err(E::custom("binary values are not Kubernetes fields"))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        charge(4)?;
        Ok(serde_json::Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        Budgeted::deserialize(deserializer).map(|b| b.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        charge::<A::Error>(0)?;
        let mut items = Vec::new();
        while let Some(Budgeted(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(items.into())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        charge::<A::Error>(0)?;
        let mut fields = serde_json::Map::new();
        while let Some(Budgeted(key)) = map.next_key()? {
            let key = match key {
                serde_json::Value::String(s) => s,
                serde_json::Value::Null => return Err(A::Error::custom("a null mapping key")),
                scalar @ (serde_json::Value::Bool(_) | serde_json::Value::Number(_)) => scalar.to_string(),
                _ => return Err(A::Error::custom("a mapping key that is not a scalar")),
            };
            let Budgeted(value) = map.next_value()?;
            fields.insert(key, value);
        }
        Ok(fields.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stream_and_skips_empty_documents() {
        let stream = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\n---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: b\n";
        let objects = parse_objects(stream).unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[1].types.as_ref().unwrap().kind, "Deployment");
    }

    #[test]
    fn broken_document_fails_the_stream_and_names_it() {
        let err = parse_objects("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: [").unwrap_err();
        assert!(err.to_string().starts_with("invalid YAML"), "{err}");
        let err = parse_objects("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n").unwrap_err();
        assert!(err.to_string().contains("metadata.name"), "{err}");
        let err = parse_objects("just a string").unwrap_err();
        assert!(err.to_string().contains("not a Kubernetes object"), "{err}");
    }

    #[test]
    fn empty_stream_is_nothing_to_apply() {
        assert!(parse_objects("").unwrap().is_empty());
    }

    #[test]
    fn a_billion_laughs_is_refused_within_the_budget() {
        // One list of 3,000 items, aliased 3,000 times: 14 KB in, 9 million items out.
        let items = "x,".repeat(3_000);
        let aliases = "*a,".repeat(3_000);
        let stream =
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\nlist: &a [{items}]\nbomb: [{aliases}]\n");
        assert!(stream.len() < 20_000);
        let err = parse_objects(&stream).unwrap_err();
        assert!(err.to_string().contains("invalid YAML"), "{err}");
        // One long string aliased a few hundred times hits the byte budget, not the alias count.
        let long = "y".repeat(10_000);
        let stream = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\ndata:\n  a: &s {long}\n{}",
            (0..200).map(|i| format!("  k{i}: *s\n")).collect::<String>()
        );
        let err = parse_objects(&stream).unwrap_err();
        assert!(err.to_string().contains("expands past"), "{err}");
        // A few honest aliases are fine.
        let stream = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  a: &s v\n  b: *s\n";
        assert_eq!(parse_objects(stream).unwrap()[0].data["data"]["b"], "v");
    }

    #[test]
    fn an_oversized_config_is_refused_unread() {
        let err = parse_objects(&"#".repeat(MAX_CONFIG_BYTES + 1)).unwrap_err();
        assert!(matches!(err, YamlError::TooLarge(_)), "{err}");
    }

    #[test]
    fn a_devfile_is_read_whole_or_refused_in_words() {
        let devfile =
            parse_devfile(b"schemaVersion: 2.2.0\ncomponents:\n- name: a\n  container: {image: x}\n").unwrap();
        assert_eq!(devfile["components"][0]["container"]["image"], "x");
        let aliased = parse_devfile(b"a: &x 1\nb: *x\n");
        assert!(matches!(aliased, Err(DevfileReadError::Aliases)), "{aliased:?}");
        assert!(matches!(parse_devfile(b"a: &x 1\n"), Err(DevfileReadError::Aliases)));
        assert!(matches!(parse_devfile(b"base: &b {x: 1}\nc:\n  <<: *b\n"), Err(DevfileReadError::Aliases)));
        assert!(matches!(parse_devfile(&[b'a', b':', b' ', 0xff, 0xfe]), Err(DevfileReadError::NotUtf8(3))));
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert!(
            matches!(parse_devfile(deep.as_bytes()), Err(DevfileReadError::TooDeep)),
            "{:?}",
            parse_devfile(deep.as_bytes())
        );
        let block: String = (0..100).map(|depth| format!("{}k:\n", "  ".repeat(depth))).collect();
        assert!(matches!(parse_devfile(block.as_bytes()), Err(DevfileReadError::TooDeep)));
        let big = format!("schemaVersion: 2.2.0\nx: \"{}\"\n", "a".repeat(1024 * 1024));
        assert!(matches!(parse_devfile(big.as_bytes()), Err(DevfileReadError::TooLarge(n)) if n == big.len()));
        assert!(matches!(parse_devfile(b"a: 1\n---\nb: 2\n"), Err(DevfileReadError::Parse(_))));
        assert!(matches!(parse_devfile(b"a: [1\n"), Err(DevfileReadError::Parse(_))));
        assert_eq!(
            parse_devfile(b"a: y\nb: no\nc: true\n").unwrap(),
            serde_json::json!({"a": "y", "b": "no", "c": true})
        );
    }
}
