//! The tunnel's transport (#39) in process: the agent's end serving on one side of a pipe,
//! the control plane's opening streams on the other, and a real TCP server behind the agent's
//! dial. Bytes go both ways whole, many streams share the tunnel, a refusal comes back with
//! its label, and a stream nobody reads holds only a bounded amount.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wsync::tunnel::transport::{OpenError, Opener, serve_streams};
use wsync::tunnel::{OpenStream, StreamRefusal};

/// A TCP echo server on loopback; its address.
async fn echo_server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = socket.into_split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    address
}

/// A tunnel whose agent end dials `echo` for port 7 and refuses every other port.
async fn tunnel(echo: std::net::SocketAddr) -> Opener {
    tunnel_and_agent(echo).await.0
}

/// The same, with the agent end's task.
async fn tunnel_and_agent(server: std::net::SocketAddr) -> (Opener, tokio::task::JoinHandle<Result<(), hyper::Error>>) {
    let (control_plane_side, agent_side) = tokio::io::duplex(64 * 1024);
    let agent = tokio::spawn(serve_streams(agent_side, move |open: OpenStream| async move {
        match open.port {
            7 => tokio::net::TcpStream::connect(server).await.map_err(|e| StreamRefusal::DialFailed(e.to_string())),
            port => Err(StreamRefusal::UndeclaredPort(port)),
        }
    }));
    (Opener::handshake(control_plane_side).await.unwrap().0, agent)
}

/// A server that accepts and says nothing; each connection's end is reported on the channel.
async fn quiet_server() -> (std::net::SocketAddr, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (ended, endings) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let ended = ended.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; 1024];
                while matches!(socket.read(&mut buffer).await, Ok(n) if n > 0) {}
                let _ = ended.send(());
            });
        }
    });
    (address, endings)
}

fn asked(port: u16) -> OpenStream {
    OpenStream { namespace: "wsync-a1-ide".into(), workspace: "ide".into(), port }
}

fn random(n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).unwrap();
    bytes
}

#[tokio::test(flavor = "multi_thread")]
async fn bytes_go_both_ways_whole_through_a_stream() {
    let opener = tunnel(echo_server().await).await;
    let stream = opener.open(&asked(7)).await.unwrap();
    let sent = random(4 * 1024 * 1024);
    let (mut read, mut write) = tokio::io::split(stream);
    let writing = {
        let sent = sent.clone();
        tokio::spawn(async move {
            write.write_all(&sent).await.unwrap();
            write.shutdown().await.unwrap();
        })
    };
    let mut echoed = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), read.read_to_end(&mut echoed)).await.unwrap().unwrap();
    writing.await.unwrap();
    assert_eq!(echoed.len(), sent.len());
    assert!(echoed == sent, "the same bytes, in order");
}

#[tokio::test(flavor = "multi_thread")]
async fn many_streams_share_one_tunnel() {
    let opener = tunnel(echo_server().await).await;
    let mut streams = Vec::new();
    for n in 0..64u8 {
        let opener = opener.clone();
        streams.push(tokio::spawn(async move {
            let mut stream = opener.open(&asked(7)).await.unwrap();
            let sent = vec![n; 64 * 1024];
            stream.write_all(&sent).await.unwrap();
            let mut echoed = vec![0u8; sent.len()];
            stream.read_exact(&mut echoed).await.unwrap();
            assert_eq!(echoed, sent);
        }));
    }
    for stream in streams {
        tokio::time::timeout(Duration::from_secs(30), stream).await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_comes_back_with_its_label_and_the_tunnel_stays_up() {
    let opener = tunnel(echo_server().await).await;
    match opener.open(&asked(22)).await {
        Err(OpenError::Refused { label, message }) => {
            assert_eq!(label, "undeclared_port");
            assert!(message.contains("port 22"), "{message}");
        }
        other => panic!("refused, not {:?}", other.map(|_| ())),
    }
    let mut stream = opener.open(&asked(7)).await.unwrap();
    stream.write_all(b"still here").await.unwrap();
    let mut echoed = [0u8; 10];
    stream.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"still here");
}

/// A workspace that sends while nobody reads fills only the bounded queues and windows on the
/// way, then waits: the sender is held back instead of buffers growing.
#[tokio::test(flavor = "multi_thread")]
async fn a_reader_that_stops_holds_back_the_writer_with_bounded_buffers() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = sent.clone();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let chunk = vec![7u8; 64 * 1024];
        while socket.write_all(&chunk).await.is_ok() {
            counted.fetch_add(chunk.len(), std::sync::atomic::Ordering::SeqCst);
        }
    });
    let opener = tunnel(address).await;
    let _stream = opener.open(&asked(7)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let first = sent.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = sent.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(first, later, "the writer is held back once the way is full");
    println!("tunnel: a reader that stops holds the writer back after {} KiB", later / 1024);
    // The way: the HTTP/2 window, two bounded queues, the pipes, and the kernel's socket buffers.
    assert!(later < 8 * 1024 * 1024, "bounded: {later} bytes sent with nobody reading");
}

/// A caller that drops its stream ends it at the workspace too, though the workspace is quiet.
#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_stream_closes_the_workspace_socket() {
    let (server, mut endings) = quiet_server().await;
    let opener = tunnel(server).await;
    let stream = opener.open(&asked(7)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(stream);
    tokio::time::timeout(Duration::from_secs(5), endings.recv()).await.expect("the workspace socket closed").unwrap();
}

/// A tunnel that dies under an open stream: the caller reads an error, never a clean end.
#[tokio::test(flavor = "multi_thread")]
async fn a_tunnel_that_dies_breaks_its_streams_loudly() {
    let (server, mut endings) = quiet_server().await;
    let (opener, agent) = tunnel_and_agent(server).await;
    let mut stream = opener.open(&asked(7)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    agent.abort();
    let mut buffer = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await.expect("an answer");
    assert!(read.is_err(), "a broken stream reads as an error: {read:?}");
    tokio::time::timeout(Duration::from_secs(5), endings.recv()).await.expect("the workspace socket closed").unwrap();
}

/// Streams past the tunnel's limit are refused at once, not queued.
#[tokio::test(flavor = "multi_thread")]
async fn streams_past_the_limit_are_refused_at_once() {
    let (server, _endings) = quiet_server().await;
    let opener = tunnel(server).await;
    let mut open = Vec::new();
    for _ in 0..wsync::tunnel::transport::MAX_STREAMS {
        open.push(opener.open(&asked(7)).await.unwrap());
    }
    assert!(matches!(opener.open(&asked(7)).await, Err(OpenError::Busy)));
    open.pop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(opener.open(&asked(7)).await.is_ok(), "a closed stream makes room");
}
