//! Applying one workspace's config, and terminating a workspace (DESIGN §2, "Applier"). Like
//! stackable's `ClusterResources`, the applier owns its calls (`api_calls`), its caches and
//! its record of copied pull secrets; its decisions (`plan`, `pull_secrets`) are pure.
//!
//! The order per inventory is cli-utils': write the inventory with old ∪ new members, apply
//! every new member with force, prune old members that left (only those it owns), then write
//! the inventory with the new members.

pub mod api_calls;
pub mod cache;
mod conditional_writes;
mod namespace_rule;
mod termination;

use crate::agent::error::{ApplyError, api_message};
use crate::agent::k8s::ClusterConfig;
use crate::agent::policy::drift::LiveObjects;
use crate::agent::policy::plan::{ApplyPolicy, InventoryApply};
use crate::agent::policy::pull_secrets::CopyTracker;
use crate::agent::policy::shared_namespace::WORKSPACE_LABEL;
use crate::agent::sync::workspace::WorkspaceKey;
use crate::protocol::ImagePullSecret;
use crate::protocol::inventory::MemberRef;
use crate::runtime::LockExt;
use api_calls::{ApiCalls, KindQuery, Ownership};
use cache::LiveInventory;
use kube::api::DynamicObject;
use kube::discovery::Scope;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

pub struct Applier {
    calls: ApiCalls,
    policy: ApplyPolicy,
    /// Who holds a copy of which image pull secret, to copy it again when it changes.
    copies: Mutex<CopyTracker>,
}

impl Applier {
    pub fn new(client: kube::Client, config: ClusterConfig, policy: ApplyPolicy) -> Self {
        Self { calls: ApiCalls::new(client, config), policy, copies: Mutex::new(CopyTracker::default()) }
    }

    /// What the agent applied, as the cluster holds it now: a full resync's drift check.
    pub async fn live_objects(&self) -> LiveObjects {
        self.calls.live_objects(&self.policy.listable_kinds(), self.policy.namespace_mode().shared()).await
    }

    /// Check the whole stream, then apply it. Nothing is sent for a stream the policy refuses.
    /// With `live` (a full resync's LIST), an object already as desired is not sent again.
    pub async fn apply(
        &self,
        key: &WorkspaceKey,
        config: &str,
        pull_secrets: &[ImagePullSecret],
        live: Option<&LiveObjects>,
    ) -> Result<(), ApplyError> {
        let mode = self.policy.namespace_mode();
        mode.check_workspace(key).map_err(ApplyError::refused)?;
        let objects = crate::yaml::parse_objects(config).map_err(|e| ApplyError::refused(e.to_string()))?;
        mode.check_pod_selection(&objects, key).map_err(ApplyError::refused)?;
        let scopes = self.resolve_scopes(&objects).await.map_err(ApplyError::applier)?;
        let mut inventories = crate::agent::policy::plan::plan(objects, key.namespace(), &self.policy, |gvk| {
            scopes.get(gvk).is_some_and(|scope| *scope == Scope::Namespaced)
        })
        .map_err(ApplyError::refused)?;
        let agent_labels = self.calls.config().agent_labels();
        for inventory in &mut inventories {
            mode.stamp(&mut inventory.inventory, key, &agent_labels);
        }
        if let Err(refusal) = self.policy.check_pull_secrets(pull_secrets) {
            if mode.shared().is_none() {
                self.delete_disallowed_copies(key.namespace()).await?;
            }
            return Err(ApplyError::refused(refusal));
        }
        let copies = match mode.shared() {
            // Used where they are: the agent writes nothing outside the shared namespace.
            Some(_) => {
                mode.check_pull_secrets(pull_secrets).map_err(ApplyError::refused)?;
                Vec::new()
            }
            None => {
                let copy_plan = crate::agent::policy::pull_secrets::plan_copies(pull_secrets, &BTreeSet::new())
                    .map_err(ApplyError::refused)?;
                let copied = self.ensure_own_namespace(key.namespace()).await?;
                // Before the config, so that the first Pod can pull its image.
                self.sync_pull_secrets(key.namespace(), &copy_plan.wanted, &copied).await?
            }
        };
        for inventory in &inventories {
            self.apply_inventory(key, inventory, live).await?;
        }
        self.copies.lock_unpoisoned().copied(key, &copies);
        Ok(())
    }

    /// The workspace is gone: its copies are no longer tracked.
    pub fn forget(&self, key: &WorkspaceKey) {
        self.copies.lock_unpoisoned().forget(key);
    }

    /// A full cycle re-applies every workspace, which records every copy again.
    pub fn forget_all_copies(&self) {
        self.copies.lock_unpoisoned().clear();
    }

    /// Copy every tracked pull secret whose source changed since its last copy. A source that
    /// is gone is an error for each workspace holding a copy; their next apply clears it.
    /// Returns the workspaces whose copy failed.
    pub async fn refresh_pull_secret_copies(&self) -> Vec<(WorkspaceKey, ApplyError)> {
        let mut failed = Vec::new();
        let sources = self.copies.lock_unpoisoned().sources();
        for source in sources {
            let current = match self.calls.fetch_pull_secret(&source).await {
                Ok(current) => current,
                Err(error) => {
                    tracing::warn!(%error, "could not read an image pull secret");
                    continue;
                }
            };
            let rv = current.as_ref().and_then(|s| s.metadata.resource_version.clone());
            let stale = self.copies.lock_unpoisoned().stale_holders(&source, rv.as_deref());
            for key in stale {
                let copied = match &current {
                    Some(secret) => match ApplyPolicy::check_pull_secret_type(&source, secret.type_.as_deref()) {
                        Ok(()) => match self.still_ours(key.namespace()).await {
                            Ok(()) => self.calls.copy_secret(secret, &source, key.namespace()).await,
                            refused => refused,
                        },
                        Err(refusal) => Err(ApplyError::applier(refusal)),
                    },
                    None => Err(missing_pull_secret(&source)),
                };
                match copied {
                    Ok(()) => {
                        tracing::info!(source = %crate::agent::policy::pull_secrets::source_ref(&source), namespace = %key.namespace(), "copied a changed image pull secret again")
                    }
                    Err(error) => failed.push((key, error)),
                }
            }
        }
        failed
    }

    pub async fn watch_caches(&self) {
        self.calls.watch_caches().await
    }

    pub fn compact_caches(&self) {
        self.calls.compact_caches();
    }

    async fn resolve_scopes(
        &self,
        objects: &[DynamicObject],
    ) -> Result<HashMap<kube::core::GroupVersionKind, Scope>, String> {
        let mut scopes = HashMap::new();
        for object in objects {
            let types = object.types.as_ref().ok_or("an object without apiVersion/kind")?;
            let gvk = kube::core::GroupVersionKind::try_from(types).map_err(|e| e.to_string())?;
            if scopes.contains_key(&gvk) {
                continue;
            }
            let (_, capabilities) = self
                .calls
                .resolve(&KindQuery::Exact(gvk.clone()))
                .await
                .map_err(|e| format!("{} {}: unknown kind: {}", types.kind, types.api_version, api_message(&e)))?;
            scopes.insert(gvk, capabilities.scope);
        }
        Ok(scopes)
    }

    /// Copy every wanted pull secret into the namespace, delete the copies no longer wanted,
    /// and record what the namespace holds. Returns each copy with its source's resourceVersion.
    async fn sync_pull_secrets(
        &self,
        namespace: &str,
        wanted: &BTreeSet<ImagePullSecret>,
        copied: &BTreeSet<ImagePullSecret>,
    ) -> Result<Vec<(ImagePullSecret, Option<String>)>, ApplyError> {
        let wanted: Vec<ImagePullSecret> = wanted.iter().cloned().collect();
        let plan = crate::agent::policy::pull_secrets::plan_copies(&wanted, copied).map_err(ApplyError::kubernetes)?;
        let mut done = Vec::new();
        for source in &wanted {
            let secret = self.calls.fetch_pull_secret(source).await?.ok_or_else(|| missing_pull_secret(source))?;
            ApplyPolicy::check_pull_secret_type(source, secret.type_.as_deref()).map_err(ApplyError::refused)?;
            self.calls.copy_secret(&secret, source, namespace).await?;
            done.push((source.clone(), secret.metadata.resource_version.clone()));
        }
        self.delete_copies(namespace, &plan.delete).await?;
        if plan.changes_record(copied) {
            let record =
                Some(crate::agent::policy::pull_secrets::render_copied(&plan.wanted)).filter(|r| !r.is_empty());
            self.calls
                .annotate_namespace(namespace, crate::agent::policy::pull_secrets::COPIED_ANNOTATION, record.as_deref())
                .await
                .map_err(|e| ApplyError::kubernetes(format!("namespace {namespace}: {}", api_message(&e))))?;
        }
        Ok(done)
    }

    async fn delete_copies(&self, namespace: &str, copies: &[ImagePullSecret]) -> Result<(), ApplyError> {
        for source in copies {
            self.calls.delete_copied_secret(namespace, source).await.map_err(|e| {
                ApplyError::kubernetes(format!("deleting the copied pull secret {}: {}", source.name, api_message(&e)))
            })?;
        }
        Ok(())
    }

    /// A refused apply still removes the copies of sources the operator no longer allows.
    async fn delete_disallowed_copies(&self, namespace: &str) -> Result<(), ApplyError> {
        let crate::agent::policy::namespace_rule::Namespace::Ours { copied, .. } =
            self.namespace_ownership(namespace).await?
        else {
            return Ok(());
        };
        let (kept, disallowed): (BTreeSet<_>, BTreeSet<_>) =
            copied.into_iter().partition(|source| self.policy.allows_pull_secret(source));
        let disallowed: Vec<_> = disallowed.into_iter().collect();
        if disallowed.is_empty() {
            return Ok(());
        }
        self.delete_copies(namespace, &disallowed).await?;
        let record = Some(crate::agent::policy::pull_secrets::render_copied(&kept)).filter(|r| !r.is_empty());
        self.calls
            .annotate_namespace(namespace, crate::agent::policy::pull_secrets::COPIED_ANNOTATION, record.as_deref())
            .await
            .map_err(|e| ApplyError::kubernetes(format!("namespace {namespace}: {}", api_message(&e))))
    }

    async fn apply_inventory(
        &self,
        key: &WorkspaceKey,
        inventory: &InventoryApply,
        live_objects: Option<&LiveObjects>,
    ) -> Result<(), ApplyError> {
        let applier = ApplyError::applier;
        let mode = self.policy.namespace_mode();
        let namespace = inventory.inventory.metadata.namespace.clone().unwrap_or_default();
        let name = inventory.inventory.metadata.name.clone().unwrap_or_default();
        let live = self
            .calls
            .live_inventory(&namespace, &name)
            .await
            .map_err(|e| applier(format!("reading inventory {namespace}/{name}: {}", api_message(&e))))?;
        if let Some(live) = &live {
            mode.check_inventory_owner(&name, live.workspace.as_deref(), key).map_err(ApplyError::refused)?;
        }
        let listed = live.map(|live| live.members).unwrap_or_default();
        let (old, dropped) = crate::agent::policy::plan::prunable(listed, &inventory.inventory, &self.policy);
        for member in &dropped {
            tracing::warn!(object = %member, inventory = %inventory.id, "dropping a member the inventory may not hold; it is never pruned");
        }
        let new = inventory.member_refs();
        if mode.shared().is_some() {
            // Other workspaces' objects share the namespace: a new member may be created, or
            // be this inventory's already, but is never taken over.
            for member in new.difference(&old) {
                if self.calls.member_owner(member, &inventory.id).await.map_err(applier)? == Ownership::Other {
                    return Err(ApplyError::refused(format!(
                        "refused {member}: it exists and does not belong to inventory {}",
                        inventory.id
                    )));
                }
            }
        }
        if !dropped.is_empty() {
            self.calls
                .drop_inventory_keys(&namespace, &name, &dropped)
                .await
                .map_err(|e| applier(format!("inventory {namespace}/{name}: {}", api_message(&e))))?;
        }
        let union: BTreeSet<MemberRef> = old.union(&new).cloned().collect();

        let with_union = crate::agent::policy::plan::with_members(&inventory.inventory, &union);
        let mut written = self.apply_unless_in_sync(&with_union, &namespace, live_objects).await.map_err(applier)?;
        crate::runtime::failpoint::hit("after-inventory-write");
        for (_, member) in &inventory.members {
            self.apply_unless_in_sync(member, &namespace, live_objects).await.map_err(applier)?;
        }
        for gone in old.difference(&new) {
            if self.calls.prune_member(gone, &inventory.id).await.map_err(applier)? {
                tracing::info!(object = %gone, inventory = %inventory.id, "pruned an object that left its inventory");
            }
        }
        if union != new {
            let with_new = crate::agent::policy::plan::with_members(&inventory.inventory, &new);
            written =
                self.apply_unless_in_sync(&with_new, &namespace, live_objects).await.map_err(applier)?.or(written);
        }
        if let Some(written) = written {
            let workspace = inventory.inventory.metadata.labels.as_ref().and_then(|l| l.get(WORKSPACE_LABEL)).cloned();
            self.calls.remember_inventory(&namespace, &name, &written, LiveInventory { workspace, members: new });
        }
        Ok(())
    }

    /// Server-side apply `object`, unless `live` shows it already as desired. Returns the
    /// resourceVersion written, or None when nothing was sent.
    async fn apply_unless_in_sync(
        &self,
        object: &DynamicObject,
        namespace: &str,
        live: Option<&LiveObjects>,
    ) -> Result<Option<String>, String> {
        if let Some(live) = live {
            let desired = serde_json::to_value(object).map_err(|e| e.to_string())?;
            if live.in_sync(&desired, namespace) {
                return Ok(None);
            }
            let kind = object.types.as_ref().map_or("", |t| t.kind.as_str());
            tracing::info!(namespace, kind, name = %object.metadata.name.as_deref().unwrap_or_default(), "applying an object that drifted or is not there");
        }
        self.calls.apply_object(object, namespace).await.map(Some)
    }
}

fn missing_pull_secret(source: &ImagePullSecret) -> ApplyError {
    ApplyError::kubernetes(format!(
        "image pull secret {} does not exist",
        crate::agent::policy::pull_secrets::source_ref(source)
    ))
}
