//! Writes guarded by what the object is, decided by the apiserver rather than by a read: a
//! delete only of the uid that was tested, and an owner annotation tested with a JSON patch
//! that writes nothing, so that the agent never needs to GET a Secret it may not read.

use crate::agent::k8s::is_status;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

/// Delete the object with this uid, and only it: one recreated meanwhile under the same name
/// is left alone. Gone or replaced already is fine (false).
async fn delete_guarded<K>(
    api: &Api<K>,
    name: &str,
    uid: Option<String>,
    params: DeleteParams,
) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams { preconditions: Some(Preconditions { uid, resource_version: None }), ..params };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whose an object is, by its owning-inventory annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    Missing,
    /// It names the inventory asked about.
    This,
    /// It names another inventory, or none.
    Other,
}

pub(super) enum Tested<K> {
    Missing,
    Holds(K),
    Differs,
}

/// Test that an object's annotation `key` holds `value`, without reading it (the agent may not
/// read Secrets outside its allowed sources, RBAC or no RBAC): a JSON patch whose one operation
/// tests the annotation writes nothing, and fails with 422 when the test fails.
pub(super) async fn test_annotation<K>(
    api: &Api<K>,
    name: &str,
    key: &str,
    value: &str,
) -> Result<Tested<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let path = format!("/metadata/annotations/{}", key.replace('~', "~0").replace('/', "~1"));
    let test: json_patch::Patch =
        serde_json::from_value(serde_json::json!([{ "op": "test", "path": path, "value": value }]))
            .map_err(kube::Error::SerdeError)?;
    match api.patch(name, &PatchParams::default(), &Patch::<()>::Json(test)).await {
        Ok(object) => Ok(Tested::Holds(object)),
        Err(e) if is_status(&e, 404) => Ok(Tested::Missing),
        Err(e) if is_status(&e, 422) => Ok(Tested::Differs),
        Err(e) => Err(e),
    }
}

/// Delete an object only while its annotation `key` holds `value`; the tested answer's uid
/// guards the delete. Gone, not ours, or replaced: false.
pub(super) async fn delete_if_annotated<K>(
    api: &Api<K>,
    name: &str,
    key: &str,
    value: &str,
    params: DeleteParams,
) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match test_annotation(api, name, key, value).await? {
        Tested::Holds(tested) => delete_guarded(api, name, tested.meta().uid.clone(), params).await,
        Tested::Missing | Tested::Differs => Ok(false),
    }
}
