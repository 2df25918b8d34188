//! A real headless Chromium, driven over its DevTools protocol: load a page, type into it,
//! press its buttons, read what it shows. One page (tab) per browser.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

pub struct Browser {
    child: Child,
    socket: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub fn launch() -> Self {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium is installed (hack/install-prerequisites.sh installs it)");
        // Chromium names its DevTools endpoint on stderr; keep draining it after.
        let stderr = child.stderr.take().expect("stderr");
        let (found, endpoint) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = found.send(url.trim().to_string());
                }
            }
        });
        let browser_url = endpoint.recv_timeout(Duration::from_secs(30)).expect("chromium's DevTools endpoint");
        let port = browser_url.split(':').nth(2).and_then(|rest| rest.split('/').next()).expect("a port");
        let page_url = page_socket(port);
        let (socket, _) = tungstenite::connect(page_url.as_str()).expect("connect to the page");
        Self { child, socket, next_id: 0, _profile: profile }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({ "id": id, "method": method, "params": params }).to_string();
        self.socket.send(Message::text(message)).expect("send to chromium");
        loop {
            let Message::Text(text) = self.socket.read().expect("read from chromium") else { continue };
            let answer: Value = serde_json::from_str(&text).expect("json from chromium");
            if answer["id"] == id {
                assert!(answer["error"].is_null(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Evaluate `expression` in the page; its value.
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true }));
        assert!(result["exceptionDetails"].is_null(), "{expression}: {result}");
        result["result"]["value"].clone()
    }

    pub fn goto(&mut self, url: &str) {
        self.eval("window.__left = true");
        self.call("Page.navigate", json!({ "url": url }));
        self.wait_for_next_page(url);
    }

    /// Run `action` (a click, a submit), and wait for the page it leads to.
    pub fn act(&mut self, action: &str) {
        self.eval("window.__left = true");
        self.eval(action);
        self.wait_for_next_page(action);
    }

    fn wait_for_next_page(&mut self, what: &str) {
        self.wait_until(&format!("the page after {what}"), "!window.__left && document.readyState === 'complete'");
    }

    /// Wait until `condition` (JavaScript) is true in the page; page loads may come between.
    pub fn wait_until(&mut self, what: &str, condition: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let guarded = format!("(() => {{ try {{ return !!({condition}); }} catch (e) {{ return false; }} }})()");
        loop {
            let result = self.call("Runtime.evaluate", json!({ "expression": guarded, "returnByValue": true }));
            if result["result"]["value"] == true {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: still not true after 30 s; the page shows:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The page's text, as a person reads it.
    pub fn text(&mut self) -> String {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": "document.body ? document.body.innerText : ''", "returnByValue": true }),
        );
        result["result"]["value"].as_str().unwrap_or_default().to_string()
    }

    pub fn html(&mut self) -> String {
        self.eval("document.documentElement.outerHTML").as_str().unwrap_or_default().to_string()
    }

    /// Open `path` of a control plane, signing in with `admin_token` on the way.
    pub fn sign_in_to(&mut self, base_url: &str, admin_token: &str, path: &str) {
        self.goto(&format!("{base_url}{path}"));
        assert!(self.location().contains("/sign-in"), "the page asks to sign in first: {}", self.location());
        self.act(&format!(
            "document.querySelector('input[name=token]').value = '{admin_token}'; document.querySelector('form').submit()"
        ));
        assert_eq!(self.location(), format!("{base_url}{path}"), "back where it was going");
    }

    pub fn location(&mut self) -> String {
        self.eval("location.href").as_str().unwrap_or_default().to_string()
    }
}

/// The DevTools socket of the browser's first page.
fn page_socket(port: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = http_get(port, "/json/list");
        let pages: Vec<Value> = serde_json::from_str(&list).unwrap_or_default();
        if let Some(url) = pages.iter().find(|p| p["type"] == "page").and_then(|p| p["webSocketDebuggerUrl"].as_str()) {
            return url.to_string();
        }
        assert!(Instant::now() < deadline, "chromium opened no page: {list}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One GET of Chromium's DevTools HTTP endpoint, read to its Content-Length: Chromium keeps
/// the connection open whatever the request says.
fn http_get(port: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(format!("127.0.0.1:{port}")).expect("DevTools HTTP");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").expect("write");
    let mut answer = Vec::new();
    let mut buffer = [0u8; 8192];
    while let Ok(n) = stream.read(&mut buffer) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok());
            if length.is_some_and(|length| body.len() >= length) {
                return body.to_string();
            }
        }
    }
    String::from_utf8_lossy(&answer).split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A page on another origin: it serves `html` to every request, on a port of its own.
pub struct ForeignSite {
    pub url: String,
}

impl ForeignSite {
    pub fn serve(html: String) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://127.0.0.1:{}", listener.local_addr().expect("address").port());
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for mut stream in listener.incoming().map_while(Result::ok) {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{html}",
                    html.len()
                );
            }
        });
        Self { url }
    }
}
