//! The tunnel's transport, on hyper's HTTP/2 over one connection the agent opened: the
//! control plane is the HTTP/2 client (it opens streams), the agent the server (it judges
//! each and dials). A stream is one request: its open request in a header, the bytes to the
//! workspace as the request body, the bytes from it as the response body. HTTP/2's flow
//! control and small bounded queues carry backpressure end to end: a slow reader on either
//! side stops the other from reading, and no buffer grows without bound.

use super::{OpenStream, StreamRefusal};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The header that carries a stream's open request, as JSON.
pub const OPEN_HEADER: &str = "wsync-open-stream";
/// The header of a refusal: its label.
pub const REFUSAL_HEADER: &str = "wsync-stream-refused";
/// Streams open at once on one tunnel, at most.
pub const MAX_STREAMS: u32 = 4096;
/// What one read moves, and how many such chunks may wait in a direction's queue.
const CHUNK: usize = 16 * 1024;
const QUEUED_CHUNKS: usize = 4;
/// Each stream's HTTP/2 window: what a peer may send before it is read.
const STREAM_WINDOW: u32 = 256 * 1024;

type Body = BoxBody<Bytes, Infallible>;
type Chunks = StreamBody<ReceiverStream<Result<Frame<Bytes>, Infallible>>>;

/// A body fed by a bounded queue: a sender that waits while the queue is full.
fn queued_body() -> (mpsc::Sender<Result<Frame<Bytes>, Infallible>>, Chunks) {
    let (sender, receiver) = mpsc::channel(QUEUED_CHUNKS);
    (sender, StreamBody::new(ReceiverStream::new(receiver)))
}

/// Read `from` into the body's queue until it ends or the body's reader goes away.
async fn pump_into_body(mut from: impl AsyncRead + Unpin, to: mpsc::Sender<Result<Frame<Bytes>, Infallible>>) {
    let mut buffer = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let chunk = Bytes::copy_from_slice(buffer.get(..n).unwrap_or_default());
                if to.send(Ok(Frame::data(chunk))).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Write a body's data into `to` until the body ends, then close `to`'s writing side.
async fn pump_from_body(mut from: Incoming, mut to: impl AsyncWrite + Unpin) {
    while let Some(Ok(frame)) = from.frame().await {
        if let Ok(data) = frame.into_data()
            && to.write_all(&data).await.is_err()
        {
            return;
        }
    }
    let _ = to.shutdown().await;
}

/// The agent's end: serve the control plane's streams on `io` until it closes. `dial` judges
/// each open request and connects; a refusal is answered with its label and words.
pub async fn serve_streams<IO, D, F, S>(io: IO, dial: D) -> Result<(), hyper::Error>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    D: Fn(OpenStream) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<S, StreamRefusal>> + Send,
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let dial = dial.clone();
        async move { Ok::<_, Infallible>(open_stream(request, dial).await) }
    });
    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .max_concurrent_streams(MAX_STREAMS)
        .initial_stream_window_size(STREAM_WINDOW)
        .serve_connection(TokioIo::new(io), service)
        .await
}

fn refused(refusal: &StreamRefusal) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(refusal.to_string())).boxed());
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
        Ok(open) => dial(open).await,
        Err(refusal) => Err(refusal),
    };
    let socket = match socket {
        Ok(socket) => socket,
        Err(refusal) => return refused(&refusal),
    };
    let (from_workspace, to_workspace) = tokio::io::split(socket);
    tokio::spawn(pump_from_body(request.into_body(), to_workspace));
    let (sender, body) = queued_body();
    tokio::spawn(pump_into_body(from_workspace, sender));
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
}

/// The control plane's end of one agent's tunnel: opens streams on it.
#[derive(Clone)]
pub struct Opener {
    send: hyper::client::conn::http2::SendRequest<Chunks>,
}

impl Opener {
    /// Start HTTP/2 on `io`, the connection the agent opened; the connection is driven by a
    /// task of its own until it closes. Returns the opener and that task.
    pub async fn handshake<IO>(io: IO) -> Result<(Self, tokio::task::JoinHandle<()>), hyper::Error>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (send, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .handshake(TokioIo::new(io))
            .await?;
        let driver = tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "a tunnel closed");
            }
        });
        Ok((Self { send }, driver))
    }

    /// Open a stream to `open`'s workspace port: a byte stream both ways, or the agent's
    /// refusal.
    pub async fn open(&self, open: &OpenStream) -> Result<tokio::io::DuplexStream, OpenError> {
        let (sender, body) = queued_body();
        let asked = serde_json::to_string(open).unwrap_or_default();
        let mut request = Request::new(body);
        if let Ok(value) = hyper::header::HeaderValue::from_str(&asked) {
            request.headers_mut().insert(OPEN_HEADER, value);
        }
        let mut send = self.send.clone();
        send.ready().await?;
        let response = send.send_request(request).await?;
        match response.status() {
            StatusCode::OK => {}
            StatusCode::FORBIDDEN => {
                let label =
                    response.headers().get(REFUSAL_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                let words = http_body_util::Limited::new(response.into_body(), 1024).collect().await;
                let message = words.map(|w| String::from_utf8_lossy(&w.to_bytes()).into_owned()).unwrap_or_default();
                return Err(OpenError::Refused { label, message });
            }
            other => return Err(OpenError::Unexpected(other)),
        }
        let (ours, theirs) = tokio::io::duplex(CHUNK.saturating_mul(QUEUED_CHUNKS));
        let (from_caller, to_caller) = tokio::io::split(ours);
        tokio::spawn(pump_into_body(from_caller, sender));
        tokio::spawn(pump_from_body(response.into_body(), to_caller));
        Ok(theirs)
    }
}
