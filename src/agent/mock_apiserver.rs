//! The mocked-apiserver tier's one apiserver (DESIGN §4, as kube-rs/controller-rs builds it):
//! a tower-test service behind a real `kube::Client`, so that a test sees each request the
//! agent sends, exactly, and answers it as the apiserver would. Test builds only.

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

pub type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// A client whose every request goes to the returned handle.
pub fn client() -> (kube::Client, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), handle)
}

/// One request, read whole, waiting for its answer.
pub struct Exchange {
    pub method: Method,
    /// Path and query, as sent.
    pub uri: String,
    pub content_type: String,
    /// The JSON body; Null when there is none.
    pub body: Value,
    send: tower_test::mock::SendResponse<Response<Body>>,
}

impl Exchange {
    pub fn answer(self, status: StatusCode, body: &Value) {
        let bytes = serde_json::to_vec(body).expect("json");
        self.send.send_response(Response::builder().status(status).body(Body::from(bytes)).expect("response"));
    }
}

/// The next request the agent sends.
pub async fn next(handle: &mut Handle) -> Exchange {
    let (request, send) = handle.next_request().await.expect("the agent sent a request");
    let method = request.method().clone();
    let uri = request.uri().to_string();
    let content_type =
        request.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let bytes = request.into_body().collect_bytes().await.expect("request body");
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("a JSON body") };
    Exchange { method, uri, content_type, body, send }
}

/// Answer every request with `answer(method, uri, body)` until the client is dropped; the
/// requests asked, as `METHOD uri`, in order.
pub fn serve(
    mut handle: Handle,
    mut answer: impl FnMut(&Method, &str, &Value) -> (StatusCode, Value) + Send + 'static,
) -> Arc<Mutex<Vec<String>>> {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = asked.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (method, uri) = (request.method().clone(), request.uri().to_string());
            let bytes = request.into_body().collect_bytes().await.unwrap_or_default();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            record.lock().expect("lock").push(format!("{method} {uri}"));
            let (status, reply) = answer(&method, &uri, &body);
            let bytes = serde_json::to_vec(&reply).expect("json");
            send.send_response(Response::builder().status(status).body(Body::from(bytes)).expect("response"));
        }
    });
    asked
}

/// A `Status` object, as the apiserver answers a refusal.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code})
}
