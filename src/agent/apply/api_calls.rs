//! Every Kubernetes call the applier makes, and the caches in front of its reads: workspace
//! namespaces, copied pull secrets, inventories and their members, discovery, and server-side
//! apply. Nothing else in the agent writes a workspace's objects.

use super::cache::{ApplyCache, LiveInventory, OwnNamespace};
pub use super::conditional_writes::Ownership;
use super::conditional_writes::{Tested, delete_if_annotated, test_annotation};
use crate::agent::error::{ApplyError, api_message};
use crate::agent::k8s::watch::{Followed, follow};
use crate::agent::k8s::{ClusterConfig, is_status};
use crate::agent::objects::{InventoryConfigMap, WorkspaceNamespace};
use crate::agent::policy::pull_secrets::{COPIED_ANNOTATION, SOURCE_ANNOTATION, source_ref};
use crate::agent::policy::shared_namespace::WORKSPACE_LABEL;
use crate::protocol::ImagePullSecret;
use crate::protocol::inventory::{INVENTORY_ID_LABEL, MemberRef, OWNING_INVENTORY_ANNOTATION};
use crate::runtime::LockExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

mod live_objects;

/// A kind to look up: exactly, from a config's apiVersion, or by group and kind alone, from an
/// inventory's member keys (then at the group's recommended version).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KindQuery {
    Exact(GroupVersionKind),
    Recommended { group: String, kind: String },
}

pub struct ApiCalls {
    client: Client,
    config: ClusterConfig,
    /// Discovery answers, asked of the apiserver once per kind.
    discovery: Mutex<HashMap<KindQuery, (ApiResource, ApiCapabilities)>>,
    cache: ApplyCache,
}

impl ApiCalls {
    pub fn new(client: Client, config: ClusterConfig) -> Self {
        Self { client, config, discovery: Mutex::new(HashMap::new()), cache: ApplyCache::default() }
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Resolve a kind through the discovery cache, asking the apiserver only on a miss.
    pub async fn resolve(&self, query: &KindQuery) -> Result<(ApiResource, ApiCapabilities), kube::Error> {
        if let Some(hit) = self.discovery.lock_unpoisoned().get(query) {
            return Ok(hit.clone());
        }
        let resolved = match query {
            KindQuery::Exact(gvk) => kube::discovery::pinned_kind(&self.client, gvk).await?,
            KindQuery::Recommended { group, kind } => {
                let api_group = kube::discovery::group(&self.client, group).await?;
                api_group.recommended_kind(kind).ok_or_else(|| {
                    kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(format!("{group}/{kind}")))
                })?
            }
        };
        self.discovery.lock_unpoisoned().insert(query.clone(), resolved.clone());
        Ok(resolved)
    }

    /// Create the workspace's namespace, labelled with the agent id and its Pod Security
    /// level. False when it exists already: whose it is, the caller judges from what is there.
    pub async fn create_namespace(&self, namespace: &str) -> Result<bool, kube::Error> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.to_string()),
                labels: Some(self.config.namespace_labels()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {
                self.cache.set_own_namespace(namespace, OwnNamespace { copied: None, labels_current: true });
                Ok(true)
            }
            Err(e) if is_status(&e, 409) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Set the Pod Security labels on a namespace the agent owns (adopted, or edited by hand).
    pub async fn assert_namespace_labels(&self, namespace: &str) -> Result<(), kube::Error> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let patch = serde_json::json!({ "metadata": { "labels": self.config.namespace_labels() } });
        let patched = api.patch(namespace, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        self.cache.set_own_namespace(namespace, own_namespace(&patched.metadata, &self.config));
        Ok(())
    }

    /// Delete a namespace; already gone is fine.
    pub async fn delete_namespace(&self, namespace: &str) -> Result<(), kube::Error> {
        self.cache.forget_namespace(namespace);
        let api: Api<Namespace> = Api::all(self.client.clone());
        match api.delete(namespace, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Some when the cache knows the namespace as the agent's own.
    pub fn cached_own_namespace(&self, namespace: &str) -> Option<OwnNamespace> {
        self.config.apply_cache.then(|| self.cache.own_namespace(namespace)).flatten()
    }

    /// A namespace's metadata, or None when it does not exist.
    pub async fn namespace_meta(&self, namespace: &str) -> Result<Option<ObjectMeta>, kube::Error> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        Ok(api.get_opt(namespace).await?.map(|ns| ns.metadata))
    }

    /// Set (or, with None, remove) one annotation on a namespace.
    pub async fn annotate_namespace(&self, namespace: &str, key: &str, value: Option<&str>) -> Result<(), kube::Error> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let patch = serde_json::json!({ "metadata": { "annotations": { key: value } } });
        let patched = api.patch(namespace, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        if self.cache.own_namespace(namespace).is_some() {
            self.cache.set_own_namespace(namespace, own_namespace(&patched.metadata, &self.config));
        }
        Ok(())
    }

    /// A pull secret's source as it is now; None when it does not exist.
    pub async fn fetch_pull_secret(&self, source: &ImagePullSecret) -> Result<Option<Secret>, ApplyError> {
        let api = Api::<Secret>::namespaced(self.client.clone(), &source.namespace);
        api.get_opt(&source.name).await.map_err(|e| {
            ApplyError::kubernetes(format!("image pull secret {}: {}", source_ref(source), api_message(&e)))
        })
    }

    /// Server-side apply a copy of `source` into `namespace`, under the source's name.
    pub async fn copy_secret(
        &self,
        source: &Secret,
        from: &ImagePullSecret,
        namespace: &str,
    ) -> Result<(), ApplyError> {
        let copy = Secret {
            metadata: ObjectMeta {
                name: Some(from.name.clone()),
                namespace: Some(namespace.to_string()),
                labels: Some(self.config.agent_labels()),
                annotations: Some(BTreeMap::from([(SOURCE_ANNOTATION.to_string(), source_ref(from))])),
                ..Default::default()
            },
            type_: source.type_.clone(),
            data: source.data.clone(),
            ..Default::default()
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let params = PatchParams::apply(&self.config.field_manager).force();
        api.patch(&from.name, &params, &Patch::Apply(&copy)).await.map(|_| ()).map_err(|e| {
            ApplyError::kubernetes(format!("copying image pull secret {}: {}", source_ref(from), api_message(&e)))
        })
    }

    /// Delete the copy of `source`, only if this agent copied it from there; already gone is fine.
    pub async fn delete_copied_secret(&self, namespace: &str, source: &ImagePullSecret) -> Result<(), kube::Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        delete_if_annotated(&api, &source.name, SOURCE_ANNOTATION, &source_ref(source), DeleteParams::default())
            .await
            .map(|_| ())
    }

    /// An inventory ConfigMap as it is now; None when it does not exist yet.
    pub async fn live_inventory(&self, namespace: &str, name: &str) -> Result<Option<LiveInventory>, kube::Error> {
        if self.config.apply_cache
            && let Some(live) = self.cache.inventory(namespace, name)
        {
            return Ok(Some(live));
        }
        let api: Api<InventoryConfigMap> = Api::namespaced(self.client.clone(), namespace);
        Ok(api.get_opt(name).await?.map(|cm| inventory_projection(&cm).1))
    }

    /// The inventories labelled for one workspace of this agent, by name, read from the cluster.
    pub async fn workspace_inventories(
        &self,
        namespace: &str,
        workspace: &str,
    ) -> Result<Vec<(String, LiveInventory)>, kube::Error> {
        let api: Api<InventoryConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let selector =
            format!("{},{WORKSPACE_LABEL}={workspace},{INVENTORY_ID_LABEL}", self.config.workspace_selector());
        let listed = api.list(&kube::api::ListParams::default().labels(&selector)).await?;
        Ok(listed.items.iter().map(|cm| (cm.name_any(), inventory_projection(cm).1)).collect())
    }

    /// Delete an inventory ConfigMap whose members are all gone; already gone is fine.
    pub async fn delete_inventory(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        let api: Api<InventoryConfigMap> = Api::namespaced(self.client.clone(), namespace);
        self.cache.forget_inventory(namespace, name);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whom an object a config is about to apply belongs to, read without a GET (a JSON patch
    /// whose one operation tests its owning-inventory annotation).
    pub async fn member_owner(&self, member: &MemberRef, inventory_id: &str) -> Result<Ownership, String> {
        let describe = |e: kube::Error| format!("reading the owner of {member}: {}", api_message(&e));
        let query = KindQuery::Recommended { group: member.group.clone(), kind: member.kind.clone() };
        let (resource, _) = self.resolve(&query).await.map_err(describe)?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &member.namespace, &resource);
        Ok(
            match test_annotation(&api, &member.name, OWNING_INVENTORY_ANNOTATION, inventory_id)
                .await
                .map_err(describe)?
            {
                Tested::Missing => Ownership::Missing,
                Tested::Holds(_) => Ownership::This,
                Tested::Differs => Ownership::Other,
            },
        )
    }

    /// Remove member keys someone else wrote into an inventory. Server-side apply never drops
    /// fields another manager owns, so this is a merge patch that sets them to null.
    pub async fn drop_inventory_keys(
        &self,
        namespace: &str,
        name: &str,
        members: &[MemberRef],
    ) -> Result<(), kube::Error> {
        let api: Api<InventoryConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let data: serde_json::Map<String, serde_json::Value> =
            members.iter().map(|m| (m.key(), serde_json::Value::Null)).collect();
        let patch = serde_json::json!({ "data": data });
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
    }

    /// The applier wrote this inventory: the next apply starts from it.
    pub fn remember_inventory(&self, namespace: &str, name: &str, resource_version: &str, live: LiveInventory) {
        self.cache.set_inventory(namespace, name, resource_version, live);
    }

    /// See `WorkspaceIndex::compact`.
    pub fn compact_caches(&self) {
        self.cache.compact();
    }

    /// Keep the apply cache from two watches: the agent's labelled namespaces, and its
    /// labelled inventories. Runs until aborted; a failed watch retries with backoff.
    pub async fn watch_caches(&self) {
        if !self.config.apply_cache {
            return;
        }
        let own = self.config.workspace_selector();
        let namespaces = async {
            // A shared namespace is the operator's: the agent may not even read it.
            if self.config.namespace_mode.shared().is_some() {
                return;
            }
            let api: Api<WorkspaceNamespace> = Api::all(self.client.clone());
            let project = |ns: WorkspaceNamespace| Some((ns.name_any(), own_namespace(&ns.metadata, &self.config)));
            follow(api, watcher::Config::default().labels(&own), "namespace", project, |event| match event {
                Followed::Listed(all) => self.cache.replace_namespaces(all),
                Followed::Applied((name, record)) => self.cache.set_own_namespace(&name, record),
                Followed::Deleted(ns) => self.cache.forget_namespace(&ns.name_any()),
            })
            .await
        };
        let inventory_selector = format!("{own},{INVENTORY_ID_LABEL}");
        let inventories = async {
            let api: Api<InventoryConfigMap> = self.config.workspaces_api(&self.client);
            let config = watcher::Config::default().labels(&inventory_selector);
            let project = |cm: InventoryConfigMap| {
                Some(((cm.namespace().unwrap_or_default(), cm.name_any()), inventory_projection(&cm)))
            };
            follow(api, config, "inventory", project, |event| match event {
                Followed::Listed(all) => self.cache.replace_inventories(all),
                Followed::Applied(((namespace, name), (rv, live))) => {
                    self.cache.set_inventory(&namespace, &name, &rv, live)
                }
                Followed::Deleted(cm) => {
                    self.cache.forget_inventory(&cm.namespace().unwrap_or_default(), &cm.name_any())
                }
            })
            .await
        };
        futures::join!(namespaces, inventories);
    }

    /// Delete a pruned member, but only if it still names `inventory_id` as its owner: an
    /// object of another inventory, or one no inventory owns, is never touched.
    pub async fn prune_member(&self, member: &MemberRef, inventory_id: &str) -> Result<bool, String> {
        let describe = |e: kube::Error| format!("pruning {member}: {}", api_message(&e));
        let query = KindQuery::Recommended { group: member.group.clone(), kind: member.kind.clone() };
        let (resource, _) = self.resolve(&query).await.map_err(describe)?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &member.namespace, &resource);
        let params = DeleteParams::background();
        let pruned = delete_if_annotated(&api, &member.name, OWNING_INVENTORY_ANNOTATION, inventory_id, params)
            .await
            .map_err(describe)?;
        if !pruned {
            tracing::info!(object = %member, inventory = inventory_id, "not pruning an object this inventory does not own");
        }
        Ok(pruned)
    }

    /// Server-side apply with force; returns the object's resourceVersion after it.
    pub async fn apply_object(&self, object: &DynamicObject, default_namespace: &str) -> Result<String, String> {
        let types = object.types.as_ref().ok_or("object without apiVersion/kind")?;
        let gvk = GroupVersionKind::try_from(types).map_err(|e| e.to_string())?;
        let name = object.name_any();
        let describe = || format!("{} {}", types.kind, name);
        let (resource, capabilities) = self
            .resolve(&KindQuery::Exact(gvk))
            .await
            .map_err(|e| format!("{}: unknown kind: {}", describe(), api_message(&e)))?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => {
                let namespace = object.namespace().unwrap_or_else(|| default_namespace.to_string());
                Api::namespaced_with(self.client.clone(), &namespace, &resource)
            }
            Scope::Cluster => Api::all_with(self.client.clone(), &resource),
        };
        let params = PatchParams::apply(&self.config.field_manager).force();
        api.patch(&name, &params, &Patch::Apply(object))
            .await
            .map(|applied| applied.resource_version().unwrap_or_default())
            .map_err(|e| format!("{}: {}", describe(), api_message(&e)))
    }
}

fn own_namespace(meta: &ObjectMeta, config: &ClusterConfig) -> OwnNamespace {
    OwnNamespace {
        copied: meta.annotations.as_ref().and_then(|a| a.get(COPIED_ANNOTATION)).cloned(),
        labels_current: config.pod_security_labels_current(meta),
    }
}

fn inventory_projection(cm: &InventoryConfigMap) -> (String, LiveInventory) {
    let members = cm.data.iter().flat_map(|data| data.keys()).filter_map(|key| MemberRef::parse(key)).collect();
    let workspace = cm.labels().get(WORKSPACE_LABEL).cloned();
    (cm.resource_version().unwrap_or_default(), LiveInventory { workspace, members })
}
