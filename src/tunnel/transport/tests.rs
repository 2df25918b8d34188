//! The tunnel's liveness on a link that goes silent: neither end closes, bytes just stop.

use super::*;
use tokio::io::DuplexStream;

/// Carries bytes between `a` and `b` until `frozen`, then carries nothing and closes nothing.
async fn wire(a: DuplexStream, b: DuplexStream, frozen: Arc<AtomicBool>) {
    async fn carry(
        mut from: tokio::io::ReadHalf<DuplexStream>,
        mut to: tokio::io::WriteHalf<DuplexStream>,
        frozen: Arc<AtomicBool>,
    ) {
        let mut buffer = vec![0u8; 4096];
        while let Ok(n) = from.read(&mut buffer).await {
            if n == 0 || frozen.load(Ordering::SeqCst) {
                break;
            }
            if to.write_all(buffer.get(..n).unwrap_or_default()).await.is_err() {
                break;
            }
        }
        // Held, not dropped: a silent peer, not a closed one.
        std::future::pending::<()>().await;
        drop((from, to));
    }
    let (a_read, a_write) = tokio::io::split(a);
    let (b_read, b_write) = tokio::io::split(b);
    tokio::join!(carry(a_read, b_write, frozen.clone()), carry(b_read, a_write, frozen));
}

fn refuse_all(_: OpenStream) -> std::future::Ready<Result<DuplexStream, StreamRefusal>> {
    std::future::ready(Err(StreamRefusal::NoPod))
}

fn asked() -> OpenStream {
    OpenStream { namespace: "ns".into(), workspace: "ws".into(), port: 8080 }
}

#[tokio::test(start_paused = true)]
async fn a_tunnel_that_stops_answering_ends_at_both_ends_within_two_keep_alives() {
    let (agent_io, near) = tokio::io::duplex(64 * 1024);
    let (far, control_plane_io) = tokio::io::duplex(64 * 1024);
    let frozen = Arc::new(AtomicBool::new(false));
    tokio::spawn(wire(near, far, frozen.clone()));
    let agent = tokio::spawn(serve_streams(agent_io, refuse_all));
    let (opener, driver) = Opener::handshake(control_plane_io).await.expect("a handshake");

    // Idle but answering pings, it stays up.
    tokio::time::sleep(KEEP_ALIVE * 5).await;
    assert!(!agent.is_finished() && !driver.is_finished(), "a live tunnel stays open while idle");
    assert!(matches!(opener.open(&asked()).await, Err(OpenError::Refused { .. })), "and carries streams");

    frozen.store(true, Ordering::SeqCst);
    let silent_at = tokio::time::Instant::now();
    let within = KEEP_ALIVE * 2 + Duration::from_secs(1);
    let agent_end = tokio::time::timeout(within, agent).await;
    assert!(agent_end.is_ok(), "the agent's end gave up on a silent control plane");
    assert!(tokio::time::timeout(within, driver).await.is_ok(), "the control plane's end gave up on a silent agent");
    assert!(silent_at.elapsed() <= within);
    assert!(opener.open(&asked()).await.is_err(), "a dead tunnel opens nothing");
}
