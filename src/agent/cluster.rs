//! Every Kubernetes side effect the agent has, in one place: the ledger object, the Deployment
//! watch and LIST, namespaces, and server-side apply of workspace configs.

use super::apply_cache::ApplyCache;
use super::apply_plan::{INVENTORY_ID_LABEL, MemberRef, OWNING_INVENTORY_ANNOTATION};
use super::index::SharedIndex;
use super::pull_secrets::{COPIED_ANNOTATION, SOURCE_ANNOTATION, source_ref};
use super::slim::{InventoryConfigMap, WorkspaceDeployment, WorkspaceNamespace};
use super::workspace::{DeploymentProjection, WorkspaceKey};
use crate::crd::{WorkspaceSyncStatus, WorkspaceSyncStatusSpec};
use crate::protocol::ImagePullSecret;
use crate::{Error, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Secret};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

/// LIST page size for the full resync's rebuild of the index.
const LIST_PAGE_SIZE: u32 = 500;

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub agent_id: String,
    pub agent_namespace: String,
    pub workspace_label_key: String,
    pub field_manager: String,
    /// Read namespaces and inventories from watched caches instead of one GET per apply.
    pub apply_cache: bool,
}

impl ClusterConfig {
    /// True when the object carries this agent's label (`Cluster::workspace_selector`).
    pub fn is_ours(&self, meta: &ObjectMeta) -> bool {
        meta.labels.as_ref().and_then(|l| l.get(&self.workspace_label_key)) == Some(&self.agent_id)
    }
}

/// The Event API caps a note at 1 KiB.
const MAX_EVENT_NOTE_BYTES: usize = 1024;

pub struct Cluster {
    client: Client,
    config: ClusterConfig,
    discovery: Mutex<HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>,
    /// (group, kind) → resource, for pruning kinds known only from an inventory's keys.
    kinds: Mutex<HashMap<(String, String), (ApiResource, ApiCapabilities)>>,
    recorder: Recorder,
    cache: ApplyCache,
}

pub fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

impl Cluster {
    pub fn new(client: Client, config: ClusterConfig) -> Self {
        let reporter = Reporter {
            controller: config.field_manager.clone(),
            instance: std::env::var("POD_NAME").ok().or_else(|| Some(config.agent_id.clone())),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            discovery: Mutex::new(HashMap::new()),
            kinds: Mutex::new(HashMap::new()),
            cache: ApplyCache::default(),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// `<label key>=<agent id>`: what marks a Deployment as one of this agent's workspaces.
    pub fn workspace_selector(&self) -> String {
        format!("{}={}", self.config.workspace_label_key, self.config.agent_id)
    }

    /// The agent's label, for what it creates besides the workspaces' own config.
    fn agent_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(self.config.workspace_label_key.clone(), self.config.agent_id.clone())])
    }

    pub fn ledger_api(&self) -> Api<WorkspaceSyncStatus> {
        Api::namespaced(self.client.clone(), &self.config.agent_namespace)
    }

    /// Fail clearly when the CRD is missing, rather than retrying forever.
    pub async fn check_crd(&self) -> Result<()> {
        match self.ledger_api().list(&ListParams::default().limit(1)).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Err(Error::CrdMissing),
            Err(e) => Err(e.into()),
        }
    }

    /// The agent's own `WorkspaceSyncStatus`, created when missing.
    pub async fn ensure_ledger_object(&self) -> Result<(WorkspaceSyncStatus, bool)> {
        let api = self.ledger_api();
        if let Some(existing) = api.get_opt(&self.config.agent_id).await? {
            return Ok((existing, false));
        }
        let object = WorkspaceSyncStatus {
            metadata: ObjectMeta { name: Some(self.config.agent_id.clone()), ..Default::default() },
            spec: WorkspaceSyncStatusSpec { agent_id: self.config.agent_id.clone(), paused: false },
            status: None,
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(created) => Ok((created, true)),
            // Another replica won the race; theirs is as good as ours.
            Err(e) if is_status(&e, 409) => Ok((api.get(&self.config.agent_id).await?, false)),
            Err(e) => Err(e.into()),
        }
    }

    /// Server-side apply the whole status under the agent's field manager, given as its
    /// serialized JSON (rendered once, also to compare with what was last written).
    pub async fn write_status(&self, status: &serde_json::value::RawValue) -> Result<()> {
        #[derive(Debug, serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct StatusPatch<'a> {
            api_version: &'a str,
            kind: &'a str,
            status: &'a serde_json::value::RawValue,
        }
        let patch = StatusPatch {
            api_version: &WorkspaceSyncStatus::api_version(&()),
            kind: &WorkspaceSyncStatus::kind(&()),
            status,
        };
        let params = PatchParams::apply(&self.config.field_manager).force();
        self.ledger_api().patch_status(&self.config.agent_id, &params, &Patch::Apply(&patch)).await?;
        Ok(())
    }

    /// One paged LIST of this agent's Deployments, projected.
    pub async fn list_workspaces(&self) -> Result<Vec<DeploymentProjection>> {
        let api: Api<WorkspaceDeployment> = Api::all(self.client.clone());
        let mut params = ListParams::default().labels(&self.workspace_selector()).limit(LIST_PAGE_SIZE);
        let mut projected = Vec::new();
        loop {
            let page = api.list(&params).await?;
            projected.extend(page.items.into_iter().filter_map(DeploymentProjection::from_deployment));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(projected),
            }
        }
    }

    /// One workspace's Deployment read again, projected; None when it is gone or no longer
    /// carries this agent's label.
    pub async fn get_workspace(&self, key: &WorkspaceKey) -> Result<Option<DeploymentProjection>, kube::Error> {
        let api: Api<WorkspaceDeployment> = Api::namespaced(self.client.clone(), key.namespace());
        let deployment = api.get_opt(key.name()).await?.filter(|d| self.config.is_ours(&d.metadata));
        Ok(deployment.and_then(DeploymentProjection::from_deployment))
    }

    /// Feed the index from one watch on this agent's Deployments, in all namespaces. Runs until
    /// dropped; the watcher's own backoff rides out apiserver trouble.
    pub async fn watch_workspaces(&self, index: SharedIndex) {
        let api: Api<WorkspaceDeployment> = Api::all(self.client.clone());
        let config = watcher::Config::default().labels(&self.workspace_selector());
        let mut relisted: Option<Vec<DeploymentProjection>> = None;
        let mut events = watcher(api, config).default_backoff().boxed();
        loop {
            let event = match events.try_next().await {
                Ok(Some(event)) => event,
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(%error, "workspace watch failed; retrying with backoff");
                    continue;
                }
            };
            let changed = match event {
                watcher::Event::Apply(d) => {
                    DeploymentProjection::from_deployment(d).is_some_and(|p| index.lock().upsert(p))
                }
                watcher::Event::Delete(d) => {
                    let key = WorkspaceKey::new(d.namespace().unwrap_or_default(), d.name_any());
                    index.lock().remove(&key)
                }
                watcher::Event::Init => {
                    relisted = Some(Vec::new());
                    false
                }
                watcher::Event::InitApply(d) => {
                    if let (Some(list), Some(p)) = (relisted.as_mut(), DeploymentProjection::from_deployment(d)) {
                        list.push(p);
                    }
                    false
                }
                watcher::Event::InitDone => {
                    let listed = relisted.take().unwrap_or_default();
                    tracing::debug!(workspaces = listed.len(), "workspace watch (re)listed");
                    index.lock().replace_all(listed);
                    true
                }
            };
            if changed {
                index.notify();
            }
        }
    }

    /// Create the workspace's namespace, labelled with the agent id, unless it exists.
    pub async fn ensure_namespace(&self, namespace: &str) -> Result<(), kube::Error> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.to_string()),
                labels: Some(self.agent_labels()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {
                self.cache.set_own_namespace(namespace, None);
                Ok(())
            }
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(e),
        }
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

    pub async fn namespace_exists(&self, namespace: &str) -> Result<bool, kube::Error> {
        Ok(self.namespace_meta(namespace).await?.is_some())
    }

    /// Some(copied-pull-secrets record) when the cache knows the namespace as the agent's own.
    pub fn cached_own_namespace(&self, namespace: &str) -> Option<Option<String>> {
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
            self.cache.set_own_namespace(namespace, own_namespace_record(&patched.metadata));
        }
        Ok(())
    }

    pub async fn get_secret(&self, source: &ImagePullSecret) -> Result<Option<Secret>, kube::Error> {
        Api::<Secret>::namespaced(self.client.clone(), &source.namespace).get_opt(&source.name).await
    }

    /// Server-side apply a copy of `source` into `namespace`, under the source's name.
    pub async fn copy_secret(
        &self,
        source: &Secret,
        from: &ImagePullSecret,
        namespace: &str,
    ) -> Result<(), kube::Error> {
        let copy = Secret {
            metadata: ObjectMeta {
                name: Some(from.name.clone()),
                namespace: Some(namespace.to_string()),
                labels: Some(self.agent_labels()),
                annotations: Some(BTreeMap::from([(SOURCE_ANNOTATION.to_string(), source_ref(from))])),
                ..Default::default()
            },
            type_: source.type_.clone(),
            data: source.data.clone(),
            ..Default::default()
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let params = PatchParams::apply(&self.config.field_manager).force();
        api.patch(&from.name, &params, &Patch::Apply(&copy)).await.map(|_| ())
    }

    /// Delete a copied secret, only if this agent copied it; already gone is fine.
    pub async fn delete_copied_secret(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let Some(secret) = api.get_opt(name).await? else { return Ok(()) };
        if !secret.annotations().contains_key(SOURCE_ANNOTATION) {
            return Ok(());
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: secret.uid(), resource_version: None }),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The members an inventory ConfigMap lists now; none when it does not exist yet.
    pub async fn inventory_members(&self, namespace: &str, name: &str) -> Result<BTreeSet<MemberRef>, kube::Error> {
        if self.config.apply_cache
            && let Some(members) = self.cache.inventory(namespace, name)
        {
            return Ok(members);
        }
        let api: Api<InventoryConfigMap> = Api::namespaced(self.client.clone(), namespace);
        Ok(api.get_opt(name).await?.map(|cm| inventory_projection(&cm).1).unwrap_or_default())
    }

    /// See `WorkspaceIndex::compact`.
    pub fn compact_caches(&self) {
        self.cache.compact();
    }

    /// The applier wrote this inventory: the next apply starts from it.
    pub fn remember_inventory(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
        members: BTreeSet<MemberRef>,
    ) {
        self.cache.set_inventory(namespace, name, resource_version, members);
    }

    /// Keep the apply cache from two watches: the agent's labelled namespaces, and its
    /// labelled inventories. Runs until aborted; a failed watch retries with backoff.
    pub async fn watch_apply_cache(&self) {
        if !self.config.apply_cache {
            return;
        }
        let own = self.workspace_selector();
        let namespaces = async {
            let api: Api<WorkspaceNamespace> = Api::all(self.client.clone());
            follow(api, watcher::Config::default().labels(&own), "namespace", |event| match event {
                Followed::Listed(all) => self
                    .cache
                    .replace_namespaces(all.iter().map(|ns| (ns.name_any(), own_namespace_record(&ns.metadata)))),
                Followed::Applied(ns) => {
                    self.cache.set_own_namespace(&ns.name_any(), own_namespace_record(&ns.metadata))
                }
                Followed::Deleted(ns) => self.cache.forget_namespace(&ns.name_any()),
            })
            .await
        };
        let inventory_selector = format!("{own},{INVENTORY_ID_LABEL}");
        let inventories = async {
            let api: Api<InventoryConfigMap> = Api::all(self.client.clone());
            let config = watcher::Config::default().labels(&inventory_selector);
            follow(api, config, "inventory", |event| match event {
                Followed::Listed(all) => self.cache.replace_inventories(all.iter().map(|cm| {
                    let (rv, members) = inventory_projection(cm);
                    ((cm.namespace().unwrap_or_default(), cm.name_any()), (rv, members))
                })),
                Followed::Applied(cm) => {
                    let (rv, members) = inventory_projection(&cm);
                    self.cache.set_inventory(&cm.namespace().unwrap_or_default(), &cm.name_any(), &rv, members);
                }
                Followed::Deleted(cm) => {
                    self.cache.forget_inventory(&cm.namespace().unwrap_or_default(), &cm.name_any())
                }
            })
            .await
        };
        futures::join!(namespaces, inventories);
    }

    async fn resolve_kind(&self, group: &str, kind: &str) -> Result<(ApiResource, ApiCapabilities), kube::Error> {
        let cache_key = (group.to_string(), kind.to_string());
        if let Some(hit) = self.kinds.lock().unwrap_or_else(|p| p.into_inner()).get(&cache_key) {
            return Ok(hit.clone());
        }
        let api_group = kube::discovery::group(&self.client, group).await?;
        let resolved = api_group.recommended_kind(kind).ok_or_else(|| {
            kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(format!("{group}/{kind}")))
        })?;
        self.kinds.lock().unwrap_or_else(|p| p.into_inner()).insert(cache_key, resolved.clone());
        Ok(resolved)
    }

    /// Delete a pruned member, but only if it still names `inventory_id` as its owner: an
    /// object of another inventory, or one no inventory owns, is never touched.
    pub async fn prune_member(&self, member: &MemberRef, inventory_id: &str) -> Result<bool, String> {
        let describe = |e: kube::Error| format!("pruning {member}: {}", api_message(&e));
        let (resource, _) = self.resolve_kind(&member.group, &member.kind).await.map_err(describe)?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &member.namespace, &resource);
        let Some(object) = api.get_opt(&member.name).await.map_err(describe)? else {
            return Ok(false);
        };
        if object.annotations().get(OWNING_INVENTORY_ANNOTATION).map(String::as_str) != Some(inventory_id) {
            tracing::info!(object = %member, inventory = inventory_id, "not pruning an object this inventory does not own");
            return Ok(false);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: object.uid(), resource_version: None }),
            ..DeleteParams::background()
        };
        match api.delete(&member.name, &params).await {
            Ok(_) => Ok(true),
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(false),
            Err(e) => Err(describe(e)),
        }
    }

    /// Emit a Warning Event; failures to emit are logged, never fatal.
    /// The workspace's namespace goes in as the related object: kube's recorder merges events
    /// with the same regarding, related and reason into one series, and failures of different
    /// workspaces on the WorkspaceSyncStatus must stay apart.
    pub async fn warn_event(
        &self,
        regarding: &ObjectReference,
        workspace: &WorkspaceKey,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let note = super::errors::cap_message_to(note, MAX_EVENT_NOTE_BYTES);
        let related = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Namespace".into()),
            name: Some(workspace.namespace().to_string()),
            ..Default::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: Some(related),
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(error = %api_message(&error), reason, "could not emit an Event");
        }
    }

    /// The reference Events about the agent itself hang on.
    pub fn ledger_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(WorkspaceSyncStatus::api_version(&()).into()),
            kind: Some(WorkspaceSyncStatus::kind(&()).into()),
            name: Some(self.config.agent_id.clone()),
            namespace: Some(self.config.agent_namespace.clone()),
            ..Default::default()
        }
    }

    /// A workspace Deployment's reference, with its uid, if it exists.
    pub async fn deployment_reference(&self, key: &WorkspaceKey) -> Option<ObjectReference> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), key.namespace());
        let deployment = api.get_opt(key.name()).await.ok()??;
        Some(ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            name: Some(key.name().to_string()),
            namespace: Some(key.namespace().to_string()),
            uid: deployment.metadata.uid,
            ..Default::default()
        })
    }

    /// Resolve a kind through the discovery cache, asking the apiserver only on a miss.
    pub async fn resolve(&self, gvk: &GroupVersionKind) -> Result<(ApiResource, ApiCapabilities), kube::Error> {
        if let Some(hit) = self.discovery.lock().unwrap_or_else(|p| p.into_inner()).get(gvk) {
            return Ok(hit.clone());
        }
        let resolved = kube::discovery::pinned_kind(&self.client, gvk).await?;
        self.discovery.lock().unwrap_or_else(|p| p.into_inner()).insert(gvk.clone(), resolved.clone());
        Ok(resolved)
    }

    /// Server-side apply one object with force, under the agent's field manager.
    /// Server-side apply with force; returns the object's resourceVersion after it.
    pub async fn apply_object(&self, object: &DynamicObject, default_namespace: &str) -> Result<String, String> {
        let types = object.types.as_ref().ok_or("object without apiVersion/kind")?;
        let gvk = GroupVersionKind::try_from(types).map_err(|e| e.to_string())?;
        let name = object.name_any();
        let describe = || format!("{} {}", types.kind, name);
        let (resource, capabilities) =
            self.resolve(&gvk).await.map_err(|e| format!("{}: unknown kind: {}", describe(), api_message(&e)))?;
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

/// The apiserver's own words for an API error, which is what a person needs to see.
fn own_namespace_record(meta: &ObjectMeta) -> Option<String> {
    meta.annotations.as_ref().and_then(|a| a.get(COPIED_ANNOTATION)).cloned()
}

fn inventory_projection(cm: &InventoryConfigMap) -> (String, BTreeSet<MemberRef>) {
    let members = cm.data.iter().flat_map(|data| data.keys()).filter_map(|key| MemberRef::parse(key)).collect();
    (cm.resource_version().unwrap_or_default(), members)
}

enum Followed<K> {
    /// A (re)list: the whole current set.
    Listed(Vec<K>),
    Applied(K),
    Deleted(K),
}

/// Follow a watch, turning kube's init/apply/delete events into whole relists and changes.
async fn follow<K>(api: Api<K>, config: watcher::Config, what: &str, mut on: impl FnMut(Followed<K>))
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut relisted: Option<Vec<K>> = None;
    let mut events = watcher(api, config).default_backoff().boxed();
    loop {
        match events.try_next().await {
            Ok(Some(watcher::Event::Init)) => relisted = Some(Vec::new()),
            Ok(Some(watcher::Event::InitApply(object))) => relisted.get_or_insert_with(Vec::new).push(object),
            Ok(Some(watcher::Event::InitDone)) => on(Followed::Listed(relisted.take().unwrap_or_default())),
            Ok(Some(watcher::Event::Apply(object))) => on(Followed::Applied(object)),
            Ok(Some(watcher::Event::Delete(object))) => on(Followed::Deleted(object)),
            Ok(None) => return,
            Err(error) => tracing::warn!(%error, "{what} watch failed; retrying with backoff"),
        }
    }
}

pub fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}
