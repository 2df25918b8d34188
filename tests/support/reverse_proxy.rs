//! A real TLS-terminating reverse proxy (Debian's nginx) in front of a plain-HTTP server, as a
//! platform team puts one in front of the control plane.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The address the proxy connects to its upstream from: not the tests' own 127.0.0.1, so
/// that a server can tell the proxy from a client that talks to it directly.
pub const PROXY_ADDRESS: &str = "127.0.0.2";

pub struct ReverseProxy {
    child: Child,
    /// `https://localhost:<port>`: what a browser opens.
    pub url: String,
}

fn nginx() -> PathBuf {
    let debian = PathBuf::from("/usr/sbin/nginx");
    if debian.exists() { debian } else { PathBuf::from("nginx") }
}

impl ReverseProxy {
    /// nginx on a free loopback port, terminating TLS with `tls`'s certificate, passing the
    /// browser's Host and the client's address (X-Forwarded-For) on to `upstream`.
    pub fn start(dir: &Path, tls: &super::tls::Tls, upstream: &str) -> Self {
        let port = super::free_port();
        let prefix = dir.join("nginx");
        std::fs::create_dir_all(prefix.join("logs")).expect("nginx dir");
        let config = format!(
            "user root;\nerror_log {prefix}/logs/error.log info;\npid {prefix}/nginx.pid;\nworker_processes 1;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log {prefix}/logs/access.log;\n  client_body_temp_path {prefix}/body;\n\
               proxy_temp_path {prefix}/proxy;\n  fastcgi_temp_path {prefix}/fastcgi;\n  uwsgi_temp_path {prefix}/uwsgi;\n\
               scgi_temp_path {prefix}/scgi;\n\
               server {{\n    listen 127.0.0.1:{port} ssl;\n    server_name localhost;\n\
                 ssl_certificate {cert};\n    ssl_certificate_key {key};\n\
                 location / {{\n      proxy_pass http://{upstream};\n      proxy_bind {PROXY_ADDRESS};\n      proxy_set_header Host $http_host;\n\
                   proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n\
                   proxy_set_header X-Forwarded-Proto https;\n    }}\n  }}\n}}\n",
            prefix = prefix.display(),
            cert = tls.cert.display(),
            key = tls.key.display(),
        );
        let file = prefix.join("nginx.conf");
        std::fs::write(&file, config).expect("nginx.conf");
        let child = Command::new(nginx())
            .args(["-p", &prefix.display().to_string(), "-c", &file.display().to_string(), "-g", "daemon off;"])
            // Its workers would hold the test harness's output open past the test.
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nginx (Debian's nginx-light; hack/install-prerequisites.sh --tests installs it)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen: {}", logs(&prefix));
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, url: format!("https://localhost:{port}") }
    }
}

fn logs(prefix: &Path) -> String {
    std::fs::read_to_string(prefix.join("logs/error.log")).unwrap_or_default()
}

impl Drop for ReverseProxy {
    /// SIGTERM, nginx's fast shutdown: the master stops its workers before it exits.
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
