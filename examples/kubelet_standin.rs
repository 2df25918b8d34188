//! The test suite's kubelet stand-in, as a program for the local demo: it marks Pods Running
//! and Ready so that the real deployment controller reports real Deployment status.

#[path = "../tests/support/kubelet.rs"]
pub mod kubelet;

#[tokio::main]
async fn main() {
    wsync::runtime::install_crypto_provider();
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(error) => {
            eprintln!("error: no cluster: {error}");
            std::process::exit(1);
        }
    };
    let selector = std::env::args().nth(1);
    kubelet::run(client, selector).await;
}
