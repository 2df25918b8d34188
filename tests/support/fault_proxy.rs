//! A fault-injecting HTTP proxy for the fault suite: the agent talks plain HTTP to it, and it
//! forwards to an upstream (the apiserver over TLS, or a control plane), streaming bodies
//! both ways so that watches work. Each request is matched against the armed faults, in
//! order; a fault fires a set number of times: an error status, a garbage answer, a hang that
//! never asks upstream, a delay after the upstream answered, or a reset mid-body.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer this status without asking upstream.
    Status(u16),
    /// Answer 201 with a body that is not JSON, without asking upstream.
    Garbage,
    /// Ask nobody and answer nothing for this long (past the client's timeout), then 504.
    Hang(Duration),
    /// Forward, then hold the answer this long: the upstream has done the work.
    DelayAnswer(Duration),
    /// Forward, send the head and the first bytes, then cut the connection.
    ResetMidBody,
}

#[derive(Debug, Clone)]
struct Armed {
    method: Option<String>,
    path_contains: String,
    fault: Fault,
    times: usize,
}

struct Inner {
    upstream: String,
    client: reqwest::Client,
    armed: Mutex<Vec<Armed>>,
    fired: Mutex<Vec<String>>,
}

#[derive(Clone)]
pub struct FaultProxy {
    inner: Arc<Inner>,
    pub url: String,
}

impl FaultProxy {
    /// `ca_pem`: the upstream's CA, for an HTTPS upstream.
    pub async fn start(upstream: &str, ca_pem: Option<&[u8]>) -> Self {
        wsync::runtime::install_crypto_provider();
        let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = ca_pem {
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(pem).expect("CA"));
        }
        let inner = Arc::new(Inner {
            upstream: upstream.trim_end_matches('/').to_string(),
            client: builder.build().expect("client"),
            armed: Mutex::new(Vec::new()),
            fired: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new().fallback(forward).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await.ok() });
        Self { inner, url }
    }

    /// Arm `fault` for the next `times` requests whose method (None: any) and path match.
    pub fn arm(&self, method: Option<&str>, path_contains: &str, fault: Fault, times: usize) {
        let armed = Armed { method: method.map(str::to_string), path_contains: path_contains.into(), fault, times };
        self.inner.armed.lock().unwrap().push(armed);
    }

    /// The faults fired so far, as `METHOD path: fault`.
    pub fn fired(&self) -> Vec<String> {
        self.inner.fired.lock().unwrap().clone()
    }

    /// Whether every armed fault has fired as often as it was armed.
    pub fn spent(&self) -> bool {
        self.inner.armed.lock().unwrap().iter().all(|a| a.times == 0)
    }
}

fn take_fault(inner: &Inner, method: &str, path: &str) -> Option<Fault> {
    let mut armed = inner.armed.lock().unwrap();
    let hit = armed
        .iter_mut()
        .find(|a| a.times > 0 && a.method.as_deref().is_none_or(|m| m == method) && path.contains(&a.path_contains))?;
    hit.times -= 1;
    let fault = hit.fault.clone();
    inner.fired.lock().unwrap().push(format!("{method} {path}: {fault:?}"));
    Some(fault)
}

async fn forward(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let method = request.method().as_str().to_string();
    let path_and_query = request.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    let fault = take_fault(&inner, &method, &path_and_query);
    if let Some(Fault::Status(status)) = fault {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = format!(
            r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected {status}","code":{}}}"#,
            status.as_u16()
        );
        return (status, [("content-type", "application/json"), ("retry-after", "1")], body).into_response();
    }
    match fault {
        Some(Fault::Garbage) => {
            return (StatusCode::CREATED, [("content-type", "application/json")], "<html>not json").into_response();
        }
        Some(Fault::Hang(duration)) => {
            tokio::time::sleep(duration).await;
            return StatusCode::GATEWAY_TIMEOUT.into_response();
        }
        _ => {}
    }
    let headers = request.headers().clone();
    let body = match axum::body::to_bytes(request.into_body(), 64 * 1024 * 1024).await {
        Ok(body) => body,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    let upstream = match send(&inner, &method, &path_and_query, &headers, body).await {
        Ok(response) => response,
        Err(error) => return (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    };
    if let Some(Fault::DelayAnswer(delay)) = fault {
        tokio::time::sleep(delay).await;
    }
    let status = StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let reset = matches!(fault, Some(Fault::ResetMidBody));
    let mut response_headers = HeaderMap::new();
    for (name, value) in upstream.headers() {
        let framing = name.as_str() == "content-length" || name.as_str() == "transfer-encoding";
        if let (false, Ok(name), Ok(value)) = (
            framing,
            axum::http::HeaderName::from_bytes(name.as_str().as_bytes()),
            axum::http::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            response_headers.insert(name, value);
        }
    }
    let stream = futures::stream::unfold(upstream, |mut upstream| async move {
        match upstream.chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), upstream)),
            Ok(None) => None,
            Err(error) => Some((Err(std::io::Error::other(error)), upstream)),
        }
    });
    let body = if reset {
        let cut = stream.take(1).chain(futures::stream::once(async {
            Err::<Bytes, _>(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected reset"))
        }));
        Body::from_stream(cut)
    } else {
        Body::from_stream(stream)
    };
    (status, response_headers, body).into_response()
}

async fn send(
    inner: &Inner,
    method: &str,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<reqwest::Response, reqwest::Error> {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut request = inner.client.request(method, format!("{}{path_and_query}", inner.upstream)).body(body);
    for (name, value) in headers {
        if name.as_str() != "host" && name.as_str() != "content-length" {
            request = request.header(name.as_str(), value.as_bytes());
        }
    }
    request.send().await
}
