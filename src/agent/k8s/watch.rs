//! Following a watch: kube's init/apply/delete events turned into whole relists and changes.

use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

pub enum Followed<K, P> {
    /// A (re)list: the whole current set, projected.
    Listed(Vec<P>),
    /// One object added or changed, projected.
    Applied(P),
    /// One object gone, as last seen.
    Deleted(K),
}

/// Follow a watch until it ends; the watcher's own backoff rides out apiserver trouble.
/// Each listed or applied object is projected as it arrives (None drops it), so a relist of
/// thousands never holds the objects themselves.
pub async fn follow<K, P>(
    api: Api<K>,
    config: watcher::Config,
    what: &str,
    project: impl Fn(K) -> Option<P>,
    mut on: impl FnMut(Followed<K, P>),
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut relisted: Option<Vec<P>> = None;
    let mut events = watcher(api, config).default_backoff().boxed();
    loop {
        match events.try_next().await {
            Ok(Some(watcher::Event::Init)) => relisted = Some(Vec::new()),
            Ok(Some(watcher::Event::InitApply(object))) => {
                if let Some(projected) = project(object) {
                    relisted.get_or_insert_with(Vec::new).push(projected);
                }
            }
            Ok(Some(watcher::Event::InitDone)) => on(Followed::Listed(relisted.take().unwrap_or_default())),
            Ok(Some(watcher::Event::Apply(object))) => {
                if let Some(projected) = project(object) {
                    on(Followed::Applied(projected));
                }
            }
            Ok(Some(watcher::Event::Delete(object))) => on(Followed::Deleted(object)),
            Ok(None) => return,
            Err(error) => tracing::warn!(%error, "{what} watch failed; retrying with backoff"),
        }
    }
}
