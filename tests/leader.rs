//! Leader election on the real apiserver: two agent processes, exactly one syncs, and the
//! other takes over when the leader dies (within the lease) or shuts down (at once).

mod support;

use std::time::{Duration, Instant};
use support::stub::{is_full, Script, StubControlPlane};
use support::*;

const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn exactly_one_replica_syncs_and_the_other_takes_over() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("le");
    create_workspace(&client, &format!("{id}-1"), "ws", Some(&id)).await;
    // Each replica talks to its own stub, so the stubs tell who syncs.
    let stubs = [
        StubControlPlane::start(Script::with_intervals(300, 1)).await,
        StubControlPlane::start(Script::with_intervals(300, 1)).await,
    ];
    let lease = ["--lease-duration", "8s", "--lease-grace", "3s"];
    let mut agents = [
        AgentProcess::start(env, &id, &stubs[0].url, &lease),
        AgentProcess::start(env, &id, &stubs[1].url, &lease),
    ];
    let leader = eventually("a leader", LONG, || (0..2).find(|&i| stubs[i].count() > 0)).await;
    let follower = 1 - leader;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(stubs[leader].count() >= 3, "the leader syncs");
    assert_eq!(stubs[follower].count(), 0, "the follower never syncs");

    // kill -9: the Lease is not released; the follower takes over once it expires.
    let killed_at = Instant::now();
    agents[leader].kill9();
    let (_, first) = stubs[follower].wait_for("the new leader's first cycle", 0, LONG, |_| true).await;
    let takeover = first.received.duration_since(killed_at);
    assert!(takeover < Duration::from_secs(20), "took over after {takeover:?}; the lease is 8s");
    assert!(is_full(&first), "a new leader starts with a full cycle");

    // SIGTERM: the leader releases the Lease, so the successor needs no expiry.
    agents[leader].restart();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = stubs[leader].count();
    let terminated_at = Instant::now();
    assert!(agents[follower].terminate(), "SIGTERM exits 0");
    let (_, first) = stubs[leader].wait_for("the successor's first cycle", before, LONG, |_| true).await;
    let handover = first.received.duration_since(terminated_at);
    assert!(handover < Duration::from_secs(6), "handed over after {handover:?}, sooner than the 8s lease");
    assert!(is_full(&first));
}
