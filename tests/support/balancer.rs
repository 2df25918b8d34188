//! A TCP balancer in front of several control-plane processes, as a Service would be: each
//! connection goes to the next backend in turn, and one that refuses it (a killed process) is
//! skipped.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::net::{TcpListener, TcpStream};

pub struct Balancer {
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Balancer {
    /// Balance over `backends`, each a URL such as `http://127.0.0.1:8080`.
    pub async fn start(backends: &[&str]) -> Self {
        let backends: Arc<Vec<String>> = Arc::new(
            backends.iter().map(|url| url.trim_start_matches("http://").trim_end_matches('/').to_string()).collect(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the balancer");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let next = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (backends, first) = (backends.clone(), next.fetch_add(1, Ordering::Relaxed));
                tokio::spawn(async move {
                    for turn in 0..backends.len() {
                        let backend = &backends[(first + turn) % backends.len()];
                        if let Ok(mut server) = TcpStream::connect(backend).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            return;
                        }
                    }
                });
            }
        });
        Self { url, task }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
