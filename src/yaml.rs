//! All YAML parsing lives here, so the archived `serde_yaml` can be swapped in one place.

use kube::api::DynamicObject;
use serde::Deserialize;

#[derive(thiserror::Error, Debug)]
pub enum YamlError {
    #[error("document {index}: invalid YAML: {source}")]
    Parse { index: usize, source: serde_yaml::Error },
    #[error("document {index}: not a Kubernetes object: {source}")]
    NotAnObject { index: usize, source: serde_json::Error },
    #[error("document {index}: missing {field}")]
    MissingField { index: usize, field: &'static str },
}

/// Parse a multi-document stream into objects. Empty documents are skipped; any broken one
/// fails the whole stream, so that nothing of a half-understood config is applied.
pub fn parse_objects(stream: &str) -> Result<Vec<DynamicObject>, YamlError> {
    let mut objects = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(stream).enumerate() {
        let value = serde_yaml::Value::deserialize(document).map_err(|source| YamlError::Parse { index, source })?;
        if value.is_null() {
            continue;
        }
        let json = serde_json::to_value(&value).map_err(|source| YamlError::NotAnObject { index, source })?;
        let object: DynamicObject =
            serde_json::from_value(json).map_err(|source| YamlError::NotAnObject { index, source })?;
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

/// Serialize any value as YAML, for CLI output and the CRD.
pub fn to_string<T: serde::Serialize>(value: &T) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(value)
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
        assert!(err.to_string().starts_with("document 1"), "{err}");
        let err = parse_objects("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n").unwrap_err();
        assert!(err.to_string().contains("metadata.name"), "{err}");
        let err = parse_objects("just a string").unwrap_err();
        assert!(err.to_string().contains("not a Kubernetes object"), "{err}");
    }

    #[test]
    fn empty_stream_is_nothing_to_apply() {
        assert!(parse_objects("").unwrap().is_empty());
    }
}
