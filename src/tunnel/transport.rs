//! The tunnel's transport, on hyper's HTTP/2 over one connection the agent opened: the
//! control plane is the HTTP/2 client (it opens streams), the agent the server (it judges
//! each and dials). A stream is one request: its open request in a header, the bytes to the
//! workspace as the request body, the bytes from it as the response body.
//!
//! Backpressure: HTTP/2's flow control and queues of a few chunks, so a reader that stops
//! holds the writer back. Teardown: one task relays both directions of a stream; a clean end
//! of one direction is a half-close, an error in either ends the whole stream (a reset, never a
//! clean end), and a caller who drops its stream ends it. Liveness: both ends ping, so a dead
//! peer ends the tunnel and the agent reconnects.

use super::{OpenStream, StreamRefusal};
use bytes::{Bytes, BytesMut};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The header that carries a stream's open request, as JSON.
pub const OPEN_HEADER: &str = "wsync-open-stream";
/// The header of a refusal: its label.
pub const REFUSAL_HEADER: &str = "wsync-stream-refused";
/// Streams open at once on one tunnel, at most: each holds a few chunks, a read buffer and a
/// socket on the agent. Above the control plane's default streams per user (512) and per
/// workspace (256), so no one user fills an agent's tunnel.
pub const MAX_STREAMS: u32 = 2048;
/// What one read moves at most (and one HTTP/2 frame), and how many such chunks may wait in
/// a direction's queue. Per-frame work bounded throughput at 16 KiB (BENCHMARKS.md).
const CHUNK: usize = 64 * 1024;
const QUEUED_CHUNKS: usize = 4;
/// The largest HTTP/2 frame either end accepts: a chunk in one frame.
const FRAME: u32 = CHUNK as u32;
/// Each stream's HTTP/2 window, and the connection's: what a peer may send before it is read.
/// A stream whose reader stalls holds its window of the connection's: 16 such streams stall a
/// tunnel, as before the chunks grew.
const STREAM_WINDOW: u32 = 512 * 1024;
const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;
/// A ping this often, and a peer that does not answer within the same is gone: a tunnel that
/// went silent is given up within 10 s, and the agent dials a new one.
const KEEP_ALIVE: Duration = Duration::from_secs(5);
/// How long opening a stream (the agent's dial included) may take.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

type Chunk = Result<Frame<Bytes>, io::Error>;
type Body = BoxBody<Bytes, io::Error>;
type Chunks = StreamBody<ReceiverStream<Chunk>>;

/// A body fed by a bounded queue: a sender that waits while the queue is full.
fn queued_body() -> (mpsc::Sender<Chunk>, Chunks) {
    let (sender, receiver) = mpsc::channel(QUEUED_CHUNKS);
    (sender, StreamBody::new(ReceiverStream::new(receiver)))
}

/// How a direction of a stream ended.
enum Ended {
    /// Its source ended cleanly: the other side was told (a half-close).
    Cleanly,
    /// An error, or its other side went away: the whole stream ends.
    Broken,
}

/// Relay one stream both ways between a socket (the workspace's, or the caller's end) and an
/// HTTP/2 stream (`incoming` in, `outgoing` out), in one task: until both directions end
/// cleanly, or either breaks. Dropping everything then closes the socket and resets the stream.
async fn relay(socket: impl AsyncRead + AsyncWrite, mut incoming: Incoming, outgoing: mpsc::Sender<Chunk>) -> bool {
    let (mut from_socket, mut to_socket) = tokio::io::split(socket);
    let inbound = async {
        loop {
            match incoming.frame().await {
                None => return if to_socket.shutdown().await.is_ok() { Ended::Cleanly } else { Ended::Broken },
                Some(Err(_)) => return Ended::Broken,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data()
                        && to_socket.write_all(&data).await.is_err()
                    {
                        return Ended::Broken;
                    }
                }
            }
        }
    };
    // Owns the sender: a clean end drops it, which ends the body (the half-close).
    let outbound = async move {
        // Each read's bytes are sent as they are, not copied; the buffer is the chunk.
        let mut buffer = BytesMut::new();
        loop {
            buffer.reserve(CHUNK);
            let read = tokio::select! {
                read = from_socket.read_buf(&mut buffer) => read,
                () = outgoing.closed() => return Ended::Broken,
            };
            match read {
                Ok(0) => {
                    drop(outgoing);
                    return Ended::Cleanly;
                }
                Ok(_) => {
                    let chunk = buffer.split().freeze();
                    if outgoing.send(Ok(Frame::data(chunk))).await.is_err() {
                        return Ended::Broken;
                    }
                }
                Err(error) => {
                    // Ends the body with an error: the peer sees a reset, not a clean end.
                    let _ = outgoing.send(Err(error)).await;
                    return Ended::Broken;
                }
            }
        }
    };
    tokio::pin!(inbound, outbound);
    let (mut inbound_done, mut outbound_done) = (false, false);
    loop {
        tokio::select! {
            ended = &mut inbound, if !inbound_done => match ended {
                Ended::Cleanly => inbound_done = true,
                Ended::Broken => return false,
            },
            ended = &mut outbound, if !outbound_done => match ended {
                Ended::Cleanly => outbound_done = true,
                Ended::Broken => return false,
            },
        }
        if inbound_done && outbound_done {
            return true;
        }
    }
}

/// The agent's end: serve the control plane's streams on `io` until it closes or stops
/// answering pings. `dial` judges each open request and connects, within [`OPEN_TIMEOUT`];
/// a refusal is answered with its label and words.
pub async fn serve_streams<IO, D, F, S>(io: IO, dial: D) -> Result<(), hyper::Error>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    D: Fn(OpenStream) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<S, StreamRefusal>> + Send,
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let dial = dial.clone();
        async move { Ok::<_, std::convert::Infallible>(open_stream(request, dial).await) }
    });
    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(KEEP_ALIVE))
        .keep_alive_timeout(KEEP_ALIVE)
        .max_concurrent_streams(MAX_STREAMS)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(FRAME)
        .serve_connection(TokioIo::new(io), service)
        .await
}

fn refused(refusal: &StreamRefusal) -> Response<Body> {
    let words = Full::new(Bytes::from(refusal.to_string())).map_err(|never| match never {});
    let mut response = Response::new(words.boxed());
    *response.status_mut() = StatusCode::FORBIDDEN;
    if let Ok(label) = hyper::header::HeaderValue::from_str(refusal.label()) {
        response.headers_mut().insert(REFUSAL_HEADER, label);
    }
    response
}

async fn open_stream<D, F, S>(request: Request<Incoming>, dial: D) -> Response<Body>
where
    D: Fn(OpenStream) -> F,
    F: Future<Output = Result<S, StreamRefusal>>,
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let asked = request.headers().get(OPEN_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
    let socket = match OpenStream::parse(asked) {
        Ok(open) => match tokio::time::timeout(OPEN_TIMEOUT, dial(open)).await {
            Ok(dialled) => dialled,
            Err(_) => Err(StreamRefusal::DialFailed("it did not answer in time".into())),
        },
        Err(refusal) => Err(refusal),
    };
    let socket = match socket {
        Ok(socket) => socket,
        Err(refusal) => return refused(&refusal),
    };
    let (sender, body) = queued_body();
    tokio::spawn(relay(socket, request.into_body(), sender));
    Response::new(body.boxed())
}

/// Why the control plane could not open a stream.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The agent refused it: the refusal's label, and its words.
    #[error("the agent refused the stream ({label}): {message}")]
    Refused { label: String, message: String },
    /// The tunnel is gone, or answered nothing a stream can be made of.
    #[error("the tunnel: {0}")]
    Tunnel(#[from] hyper::Error),
    #[error("the tunnel answered {0}")]
    Unexpected(StatusCode),
    #[error("the tunnel did not open the stream within {} s", OPEN_TIMEOUT.as_secs())]
    TimedOut,
    #[error("the tunnel has {MAX_STREAMS} streams open, the most it carries")]
    Busy,
}

/// The control plane's end of one agent's tunnel: opens streams on it.
#[derive(Clone)]
pub struct Opener {
    send: hyper::client::conn::http2::SendRequest<Chunks>,
    /// One permit a stream, held until it ends: opens past the agent's limit are refused here
    /// instead of queueing without bound.
    streams: Arc<tokio::sync::Semaphore>,
}

impl Opener {
    /// Start HTTP/2 on `io`, the connection the agent opened; the connection is driven by a
    /// task of its own until it closes or the agent stops answering pings.
    pub async fn handshake<IO>(io: IO) -> Result<(Self, tokio::task::JoinHandle<()>), hyper::Error>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (send, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(Some(KEEP_ALIVE))
            .keep_alive_timeout(KEEP_ALIVE)
            .keep_alive_while_idle(true)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(FRAME)
            .handshake(TokioIo::new(io))
            .await?;
        let driver = tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "a tunnel closed");
            }
        });
        let streams = Arc::new(tokio::sync::Semaphore::new(usize::try_from(MAX_STREAMS).unwrap_or(256)));
        Ok((Self { send, streams }, driver))
    }

    /// Open a stream to `open`'s workspace port: a byte stream both ways, or the agent's
    /// refusal.
    pub async fn open(&self, open: &OpenStream) -> Result<TunnelStream, OpenError> {
        let permit = self.streams.clone().try_acquire_owned().map_err(|_| OpenError::Busy)?;
        let (sender, body) = queued_body();
        let asked = serde_json::to_string(open).unwrap_or_default();
        let mut request = Request::new(body);
        if let Ok(value) = hyper::header::HeaderValue::from_str(&asked) {
            request.headers_mut().insert(OPEN_HEADER, value);
        }
        let mut send = self.send.clone();
        let answered = tokio::time::timeout(OPEN_TIMEOUT, async {
            send.ready().await?;
            send.send_request(request).await
        });
        let response = answered.await.map_err(|_| OpenError::TimedOut)??;
        match response.status() {
            StatusCode::OK => {}
            StatusCode::FORBIDDEN => {
                let label = response.headers().get(REFUSAL_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
                let label = label.to_string();
                let words = http_body_util::Limited::new(response.into_body(), 1024).collect().await;
                let message = words.map(|w| String::from_utf8_lossy(&w.to_bytes()).into_owned()).unwrap_or_default();
                return Err(OpenError::Refused { label, message });
            }
            other => return Err(OpenError::Unexpected(other)),
        }
        let (mut ours, theirs) = tokio::io::duplex(CHUNK.saturating_mul(QUEUED_CHUNKS));
        let broken = Arc::new(AtomicBool::new(false));
        let marks = broken.clone();
        let relaying = tokio::spawn(async move {
            let _permit = permit;
            // Marked broken before `ours` goes: the caller's next read then errs, not ends.
            if !relay(&mut ours, response.into_body(), sender).await {
                marks.store(true, Ordering::SeqCst);
            }
            drop(ours);
        });
        Ok(TunnelStream { inner: theirs, broken, relay: relaying.abort_handle() })
    }
}

/// One open stream, as the control plane's caller holds it: read and write the workspace's
/// bytes. A stream that broke reads as an error, not as a clean end; dropping it ends it.
pub struct TunnelStream {
    inner: tokio::io::DuplexStream,
    broken: Arc<AtomicBool>,
    relay: tokio::task::AbortHandle,
}

impl Drop for TunnelStream {
    fn drop(&mut self) {
        self.relay.abort();
    }
}

impl AsyncRead for TunnelStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() == before && self.broken.load(Ordering::SeqCst) {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, "the tunnel's stream broke")));
        }
        polled
    }
}

impl AsyncWrite for TunnelStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
