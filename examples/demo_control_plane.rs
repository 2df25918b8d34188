//! A scripted control plane for the local demo, until `wsync control-plane` lands: it
//! acknowledges every report and hands each workspace a ConfigMap and a Service.
//! It is the integration tests' stub, run as a program.

#[allow(dead_code)]
#[path = "../tests/support/stub.rs"]
mod stub;

use stub::{Script, StubControlPlane};

const CONFIG: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}-inventory
  namespace: {namespace}
  labels:
    cli-utils.sigs.k8s.io/inventory-id: {name}-inventory
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}-settings
  namespace: {namespace}
  annotations:
    config.k8s.io/owning-inventory: {name}-inventory
data:
  editor: vim
---
apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: {namespace}
  annotations:
    config.k8s.io/owning-inventory: {name}-inventory
spec:
  selector:
    app: {name}
  ports:
  - port: 80
    protocol: TCP
    targetPort: 8080
";

#[tokio::main]
async fn main() {
    let mut script = Script::with_intervals(60, 2);
    script.config_template = Some(CONFIG.to_string());
    let stub = StubControlPlane::start(script).await;
    println!("{}", stub.url);
    let mut reported = 0;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        for request in stub.requests().iter().skip(reported) {
            eprintln!("control plane <- {}", stub::summary(request));
        }
        reported = stub.count();
    }
}
